"""The data a partition reassignment copies when two brokers join a three-broker chronik
cluster: `chronik cluster rebalance` (plans from where the replicas are, moving the
fewest and smallest) against Kafka's way, `chronik partitions reassign --generate` over
every topic and the five brokers (Kafka's own assignment, which ignores where replicas
are now) then `--execute` and `--verify` until done, from the same starting point, in
one run.

    python bench/partition_move_bench.py            # ~150 MB of records, several minutes
    python bench/partition_move_bench.py --quick    # ~8 MB, a smoke run

One cluster: a local ZooKeeper and three `chronik serve` (broker.id 1..3, as in
cluster_bench.py); four topics of 6 to 12 partitions, replication factor 2 or 3, filled
with 1000-byte records in skewed amounts (a fixed seed: some partitions hold 5 to 20
times as much as others); then brokers 4 and 5 start. Each plan starts from that
assignment: the second starts once the first has been reassigned back.

For each plan: the bytes actually copied (the segment files of the partition
directories that appeared on a broker that did not hold the partition before, summed
from the brokers' data directories), its ratio to the least any balancing plan must move
(the figure `chronik cluster rebalance --dry-run` prints, "at least ... must move"), the
wall time from the start of the command until every partition has moved, and the spread
(max - min over the five brokers) of replicas and of leaders after it. Kafka's tool
elects no leaders: the bench runs `chronik cluster elect-leaders` (preferred) after it,
as Kafka's auto.leader.rebalance would in time, and reports the spread after that; the
rebalance elects its own. Prints a table and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's chronik (for its ZooKeeper launcher and CLI), whatever else is installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from bench_report import Run  # noqa: E402
from brokers import REPO, chronik_command, free_port  # noqa: E402
from cluster_bench import ClusterChronik, Setup  # noqa: E402
from workloads import create_topic  # noqa: E402

PLANS = ("chronik", "kafka")
FIRST, JOINING = 3, 2
# (name, partitions, replication factor)
TOPICS = (("orders", 12, 3), ("clicks", 8, 2), ("audit", 6, 3), ("metrics", 10, 2))
# Relative partition sizes drawn from here: most small, a few 5 to 20 times bigger.
WEIGHTS = (1, 1, 1, 1, 2, 5, 10, 20)
TP = tuple[str, int]


@dataclass(frozen=True)
class Settings:
    megabytes: float = 150.0  # records produced (once; replicas not counted)
    record_size: int = 1000
    seed: int = 25
    move_timeout_s: float = 1200.0


QUICK = Settings(megabytes=8.0)


class MoveCluster(Setup):
    def __init__(self) -> None:
        super().__init__("partition-move")
        self.chroot = ""

    def start(self) -> None:
        from chronik.cluster.zookeeper_process import ZooKeeperProcess

        self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", free_port()).start()
        self.chroot = f"{self.zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}"
        self.add(range(1, FIRST + 1))

    def add(self, ids: range) -> None:
        started = [ClusterChronik(n, self.chroot, self.workdir / f"broker-{n}") for n in ids]
        for broker in started:
            broker.start()
        self.brokers.extend(started)
        self._wait_for_members(len(self.brokers))

    def data_dir(self, node_id: int) -> Path:
        return self.brokers[node_id - 1].workdir / "data"


# -- what the cluster holds ----------------------------------------------------------------


def assignment(admin: AdminClient, topics: list[str]) -> tuple[dict[TP, list[int]],
                                                               dict[TP, int]]:
    """(replicas, leader) of every partition of the topics, from Metadata."""
    replicas: dict[TP, list[int]] = {}
    leaders: dict[TP, int] = {}
    for name, meta in admin.list_topics(timeout=10).topics.items():
        if name in topics:
            for p, m in meta.partitions.items():
                replicas[(name, p)] = list(m.replicas)
                leaders[(name, p)] = m.leader
    return replicas, leaders


def on_disk(cluster: MoveCluster, topics: list[str]) -> dict[tuple[int, TP], int]:
    """The bytes of segment files of each partition directory on each broker."""
    held: dict[tuple[int, TP], int] = {}
    for broker in range(1, len(cluster.brokers) + 1):
        data = cluster.data_dir(broker)
        if not data.is_dir():
            continue
        for entry in data.iterdir():
            name, _, p = entry.name.rpartition("-")
            if entry.is_dir() and name in topics and p.isdigit():
                held[(broker, (name, int(p)))] = sum(
                    f.stat().st_size for f in entry.glob("*.log") if f.is_file()
                )
    return held


def spread(replicas: dict[TP, list[int]], leaders: dict[TP, int], brokers: int) -> dict:
    rc = Counter(b for r in replicas.values() for b in r)
    lc = Counter(leaders.values())
    per_r = [rc.get(b, 0) for b in range(1, brokers + 1)]
    per_l = [lc.get(b, 0) for b in range(1, brokers + 1)]
    return {"replicas_per_broker": per_r, "leaders_per_broker": per_l,
            "replica_spread": max(per_r) - min(per_r), "leader_spread": max(per_l) - min(per_l)}


def wait_for(predicate: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # a cluster in transition answers with errors
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} not within {timeout_s}s")


def in_sync(admin: AdminClient, topics: list[str]) -> bool:
    metas = admin.list_topics(timeout=10).topics
    return all(sorted(m.isrs) == sorted(m.replicas) and m.leader >= 0
               for t in topics for m in metas[t].partitions.values())


def copies_equal(cluster: MoveCluster, topics: list[str]) -> bool:
    """Whether every copy of each partition has as many bytes as the others (an ISR may
    be full before its followers have fetched the last batches)."""
    sizes: dict[TP, set[int]] = {}
    for (_, tp), size in on_disk(cluster, topics).items():
        sizes.setdefault(tp, set()).add(size)
    return all(len(s) == 1 for s in sizes.values())


# -- the chronik CLI -----------------------------------------------------------------------


def cli(cluster: MoveCluster, *args: str, timeout: float = 120.0, check: bool = True) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH"))
                                        if p)
    run = subprocess.run(
        [*chronik_command(), *args, "--bootstrap-server", cluster.brokers[0].bootstrap],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    if check and run.returncode != 0:
        raise RuntimeError(f"chronik {' '.join(args)} exited {run.returncode}:\n"
                           f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return run.stdout


AMOUNT = r"(?:[\d.]+ [KMGT]iB \()?(\d+) bytes?\)?"
SUMMARY = re.compile(
    rf"Moves (\d+) replicas? of (\d+) partitions?: {AMOUNT} \(at least {AMOUNT} must move"
)


def parse_dry_run(out: str) -> dict[str, int]:
    found = SUMMARY.search(out)
    if found is None:
        raise RuntimeError(f"no plan summary in the dry run's output:\n{out[-2000:]}")
    moves, partitions, planned, minimum = map(int, found.groups())
    return {"moves": moves, "partitions": partitions, "planned_bytes": planned,
            "minimum_bytes": minimum}


def proposed_json(out: str) -> str:
    lines = out.splitlines()
    at = lines.index("Proposed partition reassignment configuration")
    return next(line for line in lines[at + 1:] if line.startswith("{"))


def reassign_until_done(cluster: MoveCluster, plan_file: Path, timeout_s: float) -> None:
    """`--execute` the file, then `--verify` until nothing is in progress."""
    cli(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
        str(plan_file))
    deadline = time.monotonic() + timeout_s
    while True:
        out = cli(cluster, "partitions", "reassign", "--verify", "--reassignment-json-file",
                  str(plan_file))
        if "still in progress" not in out:
            if "rather than" in out:
                raise RuntimeError(f"a partition did not end as planned:\n{out[-2000:]}")
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"reassignment not done within {timeout_s}s")
        time.sleep(1.0)


def as_plan_json(replicas: dict[TP, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(replicas.items())
    ]})


# -- the run -------------------------------------------------------------------------------


def fill(cluster: MoveCluster, topics: list[str], settings: Settings) -> dict[str, int]:
    rng = random.Random(settings.seed)
    weights = {(t, p): rng.choice(WEIGHTS)
               for t, (_, partitions, _) in zip(topics, TOPICS, strict=True)
               for p in range(partitions)}
    total = settings.megabytes * 1_000_000 / settings.record_size
    unit = total / sum(weights.values())
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1",
                         "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 262_144,
                         "log.connection.close": False})
    value = rng.randbytes(settings.record_size)
    counts: dict[str, int] = {}
    for (t, p), w in weights.items():
        n = max(1, round(w * unit))
        counts[f"{t}-{p}"] = n
        for _ in range(n):
            while True:
                try:
                    producer.produce(t, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
    left = producer.flush(300)
    del producer  # its connections closed now, not when the brokers stop
    if left:
        raise RuntimeError("records left unsent after 300 s")
    return counts


def measure(cluster: MoveCluster, admin: AdminClient, topics: list[str], plan: str,
            start: dict[TP, list[int]], settings: Settings) -> dict[str, Any]:
    before = on_disk(cluster, topics)
    brokers = len(cluster.brokers)
    started = time.monotonic()
    if plan == "chronik":
        out = cli(cluster, "cluster", "rebalance", "--timeout", str(settings.move_timeout_s),
                  timeout=settings.move_timeout_s + 120)
        done = time.monotonic()
        planned = parse_dry_run(out)["planned_bytes"]
    else:
        topics_file = cluster.workdir / "topics.json"
        topics_file.write_text(json.dumps({"version": 1,
                                           "topics": [{"topic": t} for t in topics]}))
        out = cli(cluster, "partitions", "reassign", "--generate", "--topics-to-move-json-file",
                  str(topics_file), "--broker-list",
                  ",".join(str(b) for b in range(1, brokers + 1)))
        plan_file = cluster.workdir / "kafka-plan.json"
        plan_file.write_text(proposed_json(out))
        proposed = {(e["topic"], e["partition"]): e["replicas"]
                    for e in json.loads(plan_file.read_text())["partitions"]}
        sizes = {tp: size for (_, tp), size in before.items()}
        planned = sum(sizes.get(tp, 0) for tp, r in proposed.items()
                      for b in r if b not in start[tp])
        reassign_until_done(cluster, plan_file, settings.move_timeout_s)
        done = time.monotonic()
    replicas, leaders = assignment(admin, topics)
    spread_moved = spread(replicas, leaders, brokers)
    if plan == "kafka":
        cli(cluster, "cluster", "elect-leaders", check=False)
        wait_for(lambda: all(assignment(admin, topics)[1][tp] == r[0]
                             for tp, r in replicas.items()),
                 "preferred leaders elected", 60)
        replicas, leaders = assignment(admin, topics)
    wait_for(lambda: in_sync(admin, topics), "full ISRs after the moves", 120)
    after = on_disk(cluster, topics)
    copied = {f"{tp[0]}-{tp[1]}@{b}": size for (b, tp), size in after.items()
              if (b, tp) not in before and b in replicas[tp]}
    return {
        "moved_bytes": sum(copied.values()),
        "planned_bytes": planned,
        "replicas_moved": len(copied),
        "seconds": done - started,
        **spread(replicas, leaders, brokers),
        "before_election": spread_moved,
        "copied": copied,
    }


def restore(cluster: MoveCluster, admin: AdminClient, topics: list[str],
            start: dict[TP, list[int]], settings: Settings) -> None:
    current, _ = assignment(admin, topics)
    back = {tp: r for tp, r in start.items() if current[tp] != r}
    if back:
        plan_file = cluster.workdir / "restore.json"
        plan_file.write_text(as_plan_json(back))
        reassign_until_done(cluster, plan_file, settings.move_timeout_s)
    wait_for(lambda: assignment(admin, topics)[0] == start, "the starting assignment", 60)
    wait_for(lambda: in_sync(admin, topics), "full ISRs after the restore", 120)
    # The copies the restore removed are deleted as each move completes.
    wait_for(lambda: all(b in start[tp] for b, tp in on_disk(cluster, topics)),
             "the moved copies deleted", 60)


def run(settings: Settings) -> dict[str, Any]:
    cluster = MoveCluster()
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = []
        for name, partitions, rf in TOPICS:
            topic = f"{name}-{uuid.uuid4().hex[:4]}"
            create_topic(cluster.bootstrap, topic, partitions, replication_factor=rf)
            topics.append(topic)
        t0 = time.monotonic()
        counts = fill(cluster, topics, settings)
        wait_for(lambda: in_sync(admin, topics) and copies_equal(cluster, topics),
                 "every replica holding every record", 300)
        fill_s = time.monotonic() - t0
        cluster.add(range(FIRST + 1, FIRST + JOINING + 1))
        start, leaders = assignment(admin, topics)
        held = on_disk(cluster, topics)
        sizes = {tp: max(s for (_, q), s in held.items() if q == tp) for tp in start}
        dry = parse_dry_run(cli(cluster, "cluster", "rebalance", "--dry-run"))
        report: dict[str, Any] = {
            "topics": {t: {"partitions": p, "replication_factor": rf}
                       for t, (_, p, rf) in zip(topics, TOPICS, strict=True)},
            "records": counts,
            "fill_seconds": fill_s,
            "data_bytes": sum(sizes.values()),
            "replica_bytes": sum(held.values()),
            "largest_over_smallest": max(sizes.values()) / max(1, min(sizes.values())),
            "dry_run": dry,
            "minimum_bytes": dry["minimum_bytes"],
            "start": spread(start, leaders, len(cluster.brokers)),
            "plans": {},
        }
        for i, plan in enumerate(PLANS):
            if i:
                restore(cluster, admin, topics, start, settings)
            try:
                row = measure(cluster, admin, topics, plan, start, settings)
                row["moved_over_minimum"] = row["moved_bytes"] / max(1, dry["minimum_bytes"])
            except Exception as exc:  # one failing plan must not hide the other's figures
                row = {"error": f"{type(exc).__name__}: {exc}"}
                if not cluster.alive():
                    row["error"] += f" (a broker exited)\n{cluster.log_tail()}"
            report["plans"][plan] = row
            shown = row.get("error") or (
                f"{row['moved_bytes'] / 1e6:.1f} MB moved "
                f"({row['moved_over_minimum']:.2f}x the minimum) in {row['seconds']:.1f} s"
            )
            print(f"  {plan}: {shown}", flush=True)
        return report
    except Exception as exc:
        row = {"error": f"{type(exc).__name__}: {exc}"}
        if not cluster.alive():
            row["error"] += f" (a broker exited)\n{cluster.log_tail()}"
        return row
    finally:
        cluster.stop()


ROWS = (
    ("moved_bytes", "bytes copied, MB", lambda v: f"{v / 1e6:.1f}"),
    ("moved_over_minimum", "copied / minimum", lambda v: f"{v:.2f}"),
    ("replicas_moved", "replicas moved", str),
    ("seconds", "time to complete, s", lambda v: f"{v:.1f}"),
    ("replica_spread", "replica spread (max-min)", str),
    ("leader_spread", "leader spread (max-min)", str),
)


def render(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"error: {report['error']}"
    lines = [
        f"2 brokers join 3: {report['data_bytes'] / 1e6:.1f} MB in "
        f"{sum(t['partitions'] for t in report['topics'].values())} partitions "
        f"({report['replica_bytes'] / 1e6:.1f} MB with replicas, largest/smallest partition "
        f"{report['largest_over_smallest']:.0f}x); least any balancing plan must move: "
        f"{report['minimum_bytes'] / 1e6:.1f} MB",
        f"  {'':<28}{'rebalance':>12}{'kafka gen.':>12}{'chronik/kafka':>15}",
    ]
    a, b = report["plans"].get("chronik", {}), report["plans"].get("kafka", {})
    for key, label, fmt in ROWS:
        cells = [fmt(r[key]) if key in r else "-" for r in (a, b)]
        ratio = (f"{a[key] / b[key]:.2f}"
                 if key in ("moved_bytes", "seconds") and key in a and b.get(key) else "")
        lines.append(f"  {label:<28}{cells[0]:>12}{cells[1]:>12}{ratio:>15}")
    for plan in PLANS:
        if "error" in report["plans"].get(plan, {}):
            lines.append(f"error: {plan}: {report['plans'][plan]['error'].splitlines()[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 8 MB of records")
    parser.add_argument("--megabytes", type=float, help="MB of records to produce")
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    if args.megabytes is not None:
        settings = replace(settings, megabytes=args.megabytes)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench_run = Run("partition-move-bench", args.quick)
    results = run(settings)
    output = bench_run.write(asdict(settings), results, args.output)
    print()
    print(render(results))
    print(f"JSON: {output}")
    failed = "error" in results or any("error" in r for r in results["plans"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
