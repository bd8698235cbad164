"""Jepsen-style workloads against a chaos cluster (chaos.cluster): idempotent producers
and a consumer group on one topic, transactional producers and read_committed readers
on another, event-store writers racing on a third; a poller sampling the groups'
committed offsets (chaos.offsets_poller); and the final read once the harness has
healed everything. The run directory's layout is chaos.saved_run's; chaos.checker
judges it.

    workload = Workload(cluster, out_dir, seed)
    workload.start()          # topics, workers (spread over the client nodes), poller
    ...                       # the harness's faults; workload.restart_consumer()
    ...                       # the harness heals the network, restarts what it stopped
    workload.stop()           # writers first, then the consumers once their groups have
                              # committed everything (bounded waits, then kill -9)
    workload.final_read()
    report = workload.check() # also saved as report.json
    if not report.ok: print(workload.save())

Workers run inside the client nodes' namespaces, so a fault can cut them off; the
poller and the final read run in the harness's own namespace, which faults never cut.
Stopping before healing works too (the groups then may not drain: ``drained`` false).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cluster import ChaosCluster
from .final_read import FinalRead, group_offsets, take_final_read, watermarks
from .history import HISTORY_DIR, History, read_events
from .offsets_poller import CommittedPoller
from .report import Report
from .saved_run import write_meta

TESTS_DIR = Path(__file__).resolve().parent.parent
DEFAULT_SAVE_DIR = "/tmp/chronik-chaos-runs"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Worker:
    id: str
    kind: str
    node: str
    args: list[str]
    topic: str
    group: str | None = None
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Workload:
    def __init__(
        self,
        cluster: ChaosCluster,
        out_dir: Path,
        seed: int,
        *,
        partitions: int = 3,
        producers: int = 2,
        consumers: int = 2,
        txn_producers: int = 1,
        txn_readers: int = 1,
        eventstore_writers: int = 3,
        keys: int = 12,
        event_keys: int = 4,
        producer_rate: float = 40.0,
        txn_rate: float = 4.0,
        eventstore_rate: float = 8.0,
        commit_every: float = 1.0,
        prefix: str = "chaos",
        poll_interval: float = 0.5,
    ) -> None:
        self.cluster = cluster
        self.out_dir = Path(out_dir)
        self.seed = seed
        self.rng = random.Random(seed)
        self.poll_interval = poll_interval
        safe = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
        self.topics: dict[str, TopicSpec] = {
            "queue": TopicSpec(f"{prefix}-queue", partitions, safe),
            "txn": TopicSpec(f"{prefix}-txn", partitions, safe),
            "events": TopicSpec(f"{prefix}-events", max(2, partitions - 1),
                                {**safe, "key.versioning.enable": "true"}),
        }
        self.groups = {"queue": f"{prefix}-group", "txn": f"{prefix}-txn-readers"}
        self.workers: dict[str, Worker] = {}
        bootstrap = cluster.bootstrap

        def add(prefix_: str, count: int, kind: str, role: str, extra: list[str],
                group: str | None = None) -> None:
            spec = self.topics[role]
            for i in range(1, count + 1):
                wid = f"{prefix_}{i}"
                nodes = cluster.client_names
                args = ["--id", wid, "--bootstrap", bootstrap,
                        "--history", str(self.out_dir / HISTORY_DIR / f"{wid}.jsonl"),
                        "--topic", spec.name, "--partitions", str(spec.partitions),
                        "--seed", str(seed), *extra]
                if group is not None:
                    args += ["--group", group]
                self.workers[wid] = Worker(wid, kind, nodes[(i - 1) % len(nodes)], args,
                                           spec.name, group)

        add("p", producers, "producer", "queue",
            ["--rate", str(producer_rate), "--keys", str(keys)])
        add("c", consumers, "consumer", "queue", ["--commit-every", str(commit_every)],
            self.groups["queue"])
        add("t", txn_producers, "txn", "txn", ["--rate", str(txn_rate)])
        add("r", txn_readers, "consumer", "txn",
            ["--isolation", "read_committed", "--commit-every", str(commit_every)],
            self.groups["txn"])
        add("e", eventstore_writers, "eventstore", "events",
            ["--rate", str(eventstore_rate), "--keys", str(event_keys)])
        self.harness: History | None = None
        self.poller: CommittedPoller | None = None
        self.meta: dict[str, Any] = {}
        self._topics_made = False

    # -- lifecycle ------------------------------------------------------------------------

    def create_topics(self, timeout: float = 60.0) -> None:
        for spec in self.topics.values():
            self.cluster.create_topic(spec.name, spec.partitions, rf=3, config=spec.config,
                                      timeout=timeout)
        self._topics_made = True

    def start(self) -> Workload:
        (self.out_dir / HISTORY_DIR).mkdir(parents=True, exist_ok=True)
        (self.out_dir / "logs").mkdir(exist_ok=True)
        self.harness = History(self.out_dir / HISTORY_DIR / "harness.jsonl", "harness", "harness")
        if not self._topics_made:
            self.create_topics()
        self.meta = {
            "seed": self.seed,
            "bootstrap": self.cluster.bootstrap,
            "started": time.time(),
            "stopped": None,
            "topics": {role: {"name": s.name, "partitions": s.partitions, "config": dict(s.config)}
                       for role, s in self.topics.items()},
            "groups": dict(self.groups),
            "workers": [{"id": w.id, "kind": w.kind, "node": w.node, "topic": w.topic,
                         "group": w.group, "argv": w.args} for w in self.workers.values()],
        }
        write_meta(self.out_dir, self.meta)
        self.poller = CommittedPoller(
            self.cluster, list(self.groups.values()),
            self.out_dir / HISTORY_DIR / "poller.jsonl", self.poll_interval,
        ).start()
        for w in self.workers.values():
            self._spawn(w)
        self.wait_started(list(self.workers))
        return self

    def wait_started(self, workers: list[str], timeout: float = 60.0) -> None:
        """Until each of ``workers`` has written the start line of its current
        incarnation (its libraries loaded: on two cores, starting ten Python processes
        takes seconds, which a fault schedule should not count as the run)."""
        deadline = time.monotonic() + timeout
        waiting = set(workers)
        while waiting:
            for wid in sorted(waiting):
                w = self.workers[wid]
                if self._started(w):
                    waiting.discard(wid)
                elif not w.running:
                    log = (self.out_dir / "logs" / f"{wid}.log").read_text(errors="replace")
                    raise RuntimeError(f"worker {wid} exited before starting: {log[-2000:]}")
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"workers {sorted(waiting)} not started after {timeout}s")
            if waiting:
                time.sleep(0.2)

    def _started(self, w: Worker) -> bool:
        path = self.out_dir / HISTORY_DIR / f"{w.id}.jsonl"
        if not path.exists():
            return False
        return any(e.get("op") == "start" and e.get("incarnation") == w.incarnation
                   for e in read_events(path))

    def _spawn(self, w: Worker) -> None:
        cmd = [*self.cluster.net.exec_prefix(w.node), sys.executable, "-m", "chaos.workers",
               w.kind, *w.args, "--incarnation", str(w.incarnation)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
        with open(self.out_dir / "logs" / f"{w.id}.log", "ab") as log:
            w.proc = subprocess.Popen(cmd, cwd=TESTS_DIR, env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        self._note("spawn", target=w.id, pid=w.proc.pid, node=w.node, incarnation=w.incarnation)

    def _note(self, op: str, **fields: Any) -> None:
        if self.harness is not None:
            self.harness.event(op, **fields)

    def consumers(self) -> list[str]:
        """The queue group's members (the ones ``restart_consumer`` picks from)."""
        return [w.id for w in self.workers.values()
                if w.kind == "consumer" and w.group == self.groups["queue"]]

    def kill(self, worker: str) -> None:
        """kill -9 a worker."""
        w = self.workers[worker]
        if w.running:
            assert w.proc is not None
            w.proc.kill()
            w.proc.wait()
        self._note("kill", target=worker)

    def restart_consumer(self, worker: str | None = None, down_for: float = 0.0,
                         wait: bool = True) -> str:
        """kill -9 a consumer (a random member of the queue group unless named), wait
        ``down_for`` seconds, and start it again as its next incarnation (with ``wait``,
        return once it runs); its id."""
        wid = worker or self.rng.choice(self.consumers())
        self.kill(wid)
        if down_for > 0:
            time.sleep(down_for)
        w = self.workers[wid]
        w.incarnation += 1
        self._spawn(w)
        if wait:
            self.wait_started([wid])
        return wid

    def respawn(self, worker: str, wait: bool = True) -> None:
        """Start a worker that is not running again, as its next incarnation (a fault
        schedule kills it and starts it later, as two steps)."""
        w = self.workers[worker]
        if w.running:
            return
        w.incarnation += 1
        self._spawn(w)
        if wait:
            self.wait_started([worker])

    def stop(self, timeout: float = 60.0, drain: float = 30.0) -> None:
        """Stop the writers (SIGTERM; they record the outcomes they still get), let the
        consumers read on until their groups have committed everything (at most
        ``drain`` seconds: a cluster still cut up may never let them), then stop the
        consumers. Whoever has not exited ``timeout`` seconds after its SIGTERM is
        killed with kill -9."""
        writers = [w for w in self.workers.values() if w.kind != "consumer"]
        readers = [w for w in self.workers.values() if w.kind == "consumer"]
        self._terminate(writers, timeout)
        drained = self._drain(drain) if drain > 0 else False
        self._note("drained" if drained else "not-drained")
        self._terminate(readers, timeout)
        if self.poller is not None:
            self.poller.stop()
            self.poller = None
        if self.meta:
            self.meta["stopped"] = time.time()
            self.meta["drained"] = drained
            write_meta(self.out_dir, self.meta)

    def _terminate(self, workers: list[Worker], timeout: float) -> None:
        for w in workers:
            if w.running:
                assert w.proc is not None
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for w in workers:
            if w.proc is None:
                continue
            try:
                status = w.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                status = w.proc.wait()
                self._note("kill", target=w.id, reason="did not stop in time")
            self._note("exited", target=w.id, status=status)

    def _drain(self, timeout: float) -> bool:
        """Whether, within ``timeout``, each group committed up to the end of every
        partition it reads (the last stable offset for read_committed readers)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(self._group_done(admin, role) for role in self.groups):
                    return True
            except Exception:  # noqa: BLE001 - a cluster still in trouble answers errors
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)

    def _group_done(self, admin: Any, role: str) -> bool:
        spec = self.topics[role]
        isolation = "read_committed" if role == "txn" else "read_uncommitted"
        ends = watermarks(self.cluster.bootstrap, {spec.name: spec.partitions}, isolation)
        committed = group_offsets(admin, self.groups[role], 5.0)
        return all(committed.get(k, -1) >= end for k, end in ends.items() if end > 0)

    def final_read(self, timeout: float = 120.0) -> FinalRead:
        """After the harness healed the network and restarted what it stopped: every
        partition led with its full ISR, then each replica, the leaders' answers and the
        committed offsets saved under final/ (chaos.final_read)."""
        self._note("final-read")
        final = take_final_read(
            self.cluster, self.out_dir,
            {s.name: s.partitions for s in self.topics.values()},
            committed_topics=[self.topics["txn"].name],
            groups=list(self.groups.values()), timeout=timeout,
        )
        self._note("final-read-done")
        return final

    def check(self) -> Report:
        from .checker import REPORT_FILE, check

        report = check(self.out_dir)
        report.save(self.out_dir / REPORT_FILE)
        return report

    def save(self, dest: Path | None = None) -> Path:
        """Copy the run (with each broker's log) where it outlives the test's temporary
        directory: ``dest``, else $CHAOS_SAVE_DIR or /tmp/chronik-chaos-runs, in a
        directory named by time and seed. Check it again with ``python -m chaos.checker``."""
        if dest is None:
            root = Path(os.environ.get("CHAOS_SAVE_DIR", DEFAULT_SAVE_DIR))
            dest = root / f"{time.strftime('%Y%m%d-%H%M%S')}-seed{self.seed}"
        shutil.copytree(self.out_dir, dest, dirs_exist_ok=True)
        logs = dest / "brokers"
        logs.mkdir(exist_ok=True)
        for b in self.cluster.brokers.values():
            if b.log_path.exists():
                shutil.copy2(b.log_path, logs / f"{b.name}.log")
        return dest

    def close(self) -> None:
        """Kill whatever still runs; safe after stop() and on any failure."""
        for w in self.workers.values():
            if w.running:
                assert w.proc is not None
                w.proc.kill()
                w.proc.wait()
        if self.poller is not None:
            self.poller.stop()
            self.poller = None
        if self.harness is not None:
            self.harness.close()
            self.harness = None

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
