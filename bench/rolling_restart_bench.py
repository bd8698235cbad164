"""What a planned restart of a broker costs the clients of a 3-broker chronik cluster,
with controlled shutdown (the broker hands its leadership on before it stops) against
without it (controlled.shutdown.enable=false: the partitions it led fail over once its
ZooKeeper registration is gone), in one run.

    python bench/rolling_restart_bench.py            # about three minutes
    python bench/rolling_restart_bench.py --quick    # one restart each, about a minute

Each mode gets a fresh cluster (a local ZooKeeper and three `chronik serve`, broker.id
1..3, as in replication_bench.py) and a topic of 6 partitions, replication factor 3,
min.insync.replicas 2. A producer in its own process (confluent-kafka, idempotent,
acks=all, linger.ms=0) sends a steady 500 records/s, round-robin over the partitions,
timing each record from produce() to its delivery report. Then, a few times over, the
broker that leads most of the topic's partitions gets SIGTERM, is started again once it
has exited, and the run waits until every ISR is full before the next. For each restart,
from the SIGTERM until the full ISRs: the longest time between two acknowledgements of
one partition (with a record due on every partition each 12 ms, anything much longer is
the restart), and the 99th percentile and the maximum of the latency of the records sent
meanwhile. Prints a table (worst restart of each mode, and the on/off ratio) and writes
JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import signal
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's chronik (for its ZooKeeper launcher), whatever else is installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from bench_report import Run  # noqa: E402
from brokers import free_port  # noqa: E402
from cluster_bench import CLUSTER_SIZE, ClusterChronik, Setup  # noqa: E402

# Kafka's defaults but the session timeout (18 s), as replication_bench states them: the
# failover without controlled shutdown does not wait on it (SIGTERM closes the session).
from replication_bench import BROKER_SETTINGS  # noqa: E402
from workloads import create_topic  # noqa: E402

MODES = ("on", "off")


@dataclass(frozen=True)
class Settings:
    partitions: int = 6
    rate: int = 500
    record_size: int = 100
    restarts: int = 3
    warmup_s: float = 4.0
    settle_s: float = 3.0


QUICK = Settings(restarts=1, warmup_s=2.0, settle_s=1.0)


class RestartableChronik(ClusterChronik):
    """A cluster broker with the bench's settings, stopped with SIGTERM and started again
    on the same data dir and port."""

    def __init__(self, node_id: int, zookeeper: str, workdir: Path, controlled: bool) -> None:
        super().__init__(node_id, zookeeper, workdir)
        self.controlled = controlled
        self.restarts = 0

    def command(self) -> list[str]:
        settings = {**BROKER_SETTINGS,
                    "controlled.shutdown.enable": "true" if self.controlled else "false"}
        extra = [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")]
        return [*super().command(), *extra]

    def terminate(self, timeout_s: float = 60.0) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        if code != 0:
            raise RuntimeError(f"{self.name} exited with {code}:\n{self.log_tail()}")
        # Its log, kept beside the next run's (which starts a new file).
        self.restarts += 1
        self.log_path.rename(self.log_path.with_suffix(f".{self.restarts}.log"))


class RestartCluster(Setup):
    def __init__(self, controlled: bool) -> None:
        super().__init__(f"controlled-{'on' if controlled else 'off'}")
        self.controlled = controlled

    def start(self) -> None:
        from chronik.cluster.zookeeper_process import ZooKeeperProcess

        self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", free_port()).start()
        chroot = f"{self.zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}"
        self.brokers = [
            RestartableChronik(n, chroot, self.workdir / f"broker-{n}", self.controlled)
            for n in range(1, CLUSTER_SIZE + 1)
        ]
        for broker in self.brokers:
            broker.start()
        self._wait_for_members(len(self.brokers))

    def broker(self, node_id: int) -> RestartableChronik:
        return self.brokers[node_id - 1]  # type: ignore[return-value]


# -- the producer, in its own process ---------------------------------------------------


def _produce(options: dict[str, Any], ready: Any, stop: Any, results: Any) -> None:
    """Records at a steady rate, round-robin over the partitions; (partition, sent,
    acknowledged or None, error) per record, on time.monotonic(), system-wide."""
    from confluent_kafka import Producer

    try:
        producer = Producer({
            "bootstrap.servers": options["bootstrap"],
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 120_000,
            **({"debug": os.environ["BENCH_RDKAFKA_DEBUG"]}
               if os.environ.get("BENCH_RDKAFKA_DEBUG") else {}),
        })
        records: list[tuple[int, float, float | None, str | None]] = []
        partitions, rate = options["partitions"], options["rate"]
        value = b"x" * options["record_size"]

        def report(partition: int, sent: float):
            def on_delivery(err: Any, msg: Any) -> None:
                now = time.monotonic()
                if err is None:
                    records.append((partition, sent, now, None))
                else:
                    records.append((partition, sent, None, str(err)))

            return on_delivery

        producer.produce(options["topic"], value, partition=0)
        producer.flush(30)
        ready.set()
        started = time.monotonic()
        n = 0
        while not stop.is_set():
            due = started + n / rate
            now = time.monotonic()
            if now < due:
                producer.poll(min(due - now, 0.05))
                continue
            partition = n % partitions
            producer.produce(options["topic"], value, partition=partition,
                             on_delivery=report(partition, now))
            producer.poll(0)
            n += 1
        producer.flush(120)
        results.put({"records": records})
    except Exception as exc:
        ready.set()
        results.put({"error": f"{type(exc).__name__}: {exc}"})


class SteadyProducer:
    def __init__(self, bootstrap: str, topic: str, settings: Settings) -> None:
        ctx = multiprocessing.get_context("spawn")  # not fork: librdkafka threads
        self._ready, self._stop, self._results = ctx.Event(), ctx.Event(), ctx.Queue()
        options = {"bootstrap": bootstrap, "topic": topic, "partitions": settings.partitions,
                   "rate": settings.rate, "record_size": settings.record_size}
        self._process = ctx.Process(
            target=_produce, args=(options, self._ready, self._stop, self._results),
            daemon=True,
        )

    def start(self) -> SteadyProducer:
        self._process.start()
        if not self._ready.wait(60):
            raise TimeoutError("producer not ready within 60 s")
        return self

    def finish(self) -> list[tuple[int, float, float | None, str | None]]:
        self._stop.set()
        try:
            out = self._results.get(timeout=180)
        except queue.Empty:
            raise TimeoutError("producer did not report within 180 s") from None
        finally:
            self._process.join(10)
        if "error" in out:
            raise RuntimeError(f"producer: {out['error']}")
        return out["records"]


# -- one mode ---------------------------------------------------------------------------


def leaders(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    meta = admin.list_topics(topic, timeout=5).topics[topic]
    return {p: (m.leader, list(m.isrs)) for p, m in meta.partitions.items()}


def wait_for(predicate: Any, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # a cluster in transition answers with errors
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} not within {timeout_s}s")


@dataclass
class Restart:
    victim: int
    led: int  # partitions of the topic it led
    sigterm: float
    exited: float
    back: float  # every ISR full again

    def window(self) -> tuple[float, float]:
        return self.sigterm, self.back


def restart_once(cluster: RestartCluster, admin: AdminClient, topic: str,
                 settings: Settings) -> Restart:
    state = leaders(admin, topic)
    counts = {b: sum(1 for lead, _ in state.values() if lead == b)
              for b in range(1, CLUSTER_SIZE + 1)}
    victim = max(counts, key=lambda b: counts[b])
    broker = cluster.broker(victim)
    sigterm = time.monotonic()
    broker.terminate()
    exited = time.monotonic()
    broker.start()
    wait_for(lambda: all(len(isr) == CLUSTER_SIZE for _, isr in leaders(admin, topic).values()),
             f"broker {victim} back in every ISR")
    back = time.monotonic()
    time.sleep(settings.settle_s)
    return Restart(victim, counts[victim], sigterm, exited, back)


def judge(restart: Restart, records: list[tuple[int, float, float | None, str | None]],
          partitions: int) -> dict[str, object]:
    start, end = restart.window()
    gaps = []
    for p in range(partitions):
        acks = sorted(a for q, _, a, _ in records if q == p and a is not None)
        # The last acknowledgement before the SIGTERM opens the window's first gap, the
        # first after it closes the last.
        before = [a for a in acks if a < start]
        inside = [a for a in acks if start <= a <= end]
        seq = before[-1:] + inside + [a for a in acks if a > end][:1]
        gaps.append(max((b - a for a, b in zip(seq, seq[1:], strict=False)), default=0.0))
    timed = sorted(((a - s) * 1000, q, s - start) for q, s, a, _ in records
                   if a is not None and start <= s <= end)
    latencies = [ms for ms, _, _ in timed]
    errors = [e for _, s, _, e in records if e is not None and start <= s <= end]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None
    return {
        "victim": restart.victim,
        "partitions_led": restart.led,
        "longest_ack_gap_s": max(gaps),
        "ack_gap_by_partition_s": gaps,
        "latency_p50_ms": statistics.median(latencies) if latencies else None,
        "latency_p99_ms": p99,
        "latency_max_ms": latencies[-1] if latencies else None,
        "records_in_window": len(latencies),
        # (latency ms, partition, sent that long after the SIGTERM, s) of the slowest.
        "slowest": [(round(ms, 1), q, round(at, 3)) for ms, q, at in timed[-3:]],
        "errors": len(errors),
        "sigterm_to_exit_s": restart.exited - restart.sigterm,
        "sigterm_to_full_isr_s": restart.back - restart.sigterm,
    }


def run_mode(controlled: bool, settings: Settings) -> dict[str, object]:
    cluster = RestartCluster(controlled)
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = f"rolling-restart-bench-{uuid.uuid4().hex[:6]}"
        create_topic(cluster.bootstrap, topic, settings.partitions, replication_factor=3,
                     config={"min.insync.replicas": "2"})
        producer = SteadyProducer(cluster.bootstrap, topic, settings).start()
        try:
            time.sleep(settings.warmup_s)
            restarts = [restart_once(cluster, admin, topic, settings)
                        for _ in range(settings.restarts)]
        finally:
            records = producer.finish()
        rows = [judge(r, records, settings.partitions) for r in restarts]
        failed = sum(1 for *_, e in records if e is not None)
        return {
            "restarts": rows,
            "records": len(records),
            "delivery_errors": failed,
            "longest_ack_gap_s": max(float(r["longest_ack_gap_s"]) for r in rows),
            "latency_p99_ms": max(float(r["latency_p99_ms"] or 0) for r in rows),
            "latency_max_ms": max(float(r["latency_max_ms"] or 0) for r in rows),
            "sigterm_to_exit_s": max(float(r["sigterm_to_exit_s"]) for r in rows),
        }
    except Exception as exc:
        row: dict[str, object] = {"error": f"{type(exc).__name__}: {exc}"}
        if not cluster.alive():
            row["error"] = f"{row['error']} (a broker exited)\n{cluster.log_tail()}"
        return row
    finally:
        cluster.stop()


ROWS = (
    ("longest_ack_gap_s", "longest gap between acks, s", "{:.3f}"),
    ("latency_p99_ms", "produce latency p99, ms", "{:.1f}"),
    ("latency_max_ms", "produce latency max, ms", "{:.1f}"),
    ("sigterm_to_exit_s", "SIGTERM to exit, s", "{:.2f}"),
    ("delivery_errors", "delivery errors (whole run)", "{}"),
)


def render(results: dict[str, dict], settings: Settings) -> str:
    lines = [
        f"SIGTERM-restart of the broker leading most partitions, worst of {settings.restarts}; "
        f"3 brokers, RF=3, {settings.partitions} partitions, {settings.rate} records/s "
        "idempotent acks=all",
        f"  {'':<34}{'controlled':>12}{'failover':>12}{'on/off':>9}",
    ]
    on, off = results.get("on", {}), results.get("off", {})
    for key, label, fmt in ROWS:
        cells = [fmt.format(r[key]) if key in r else "-" for r in (on, off)]
        a, b = on.get(key), off.get(key)
        ratio = f"{float(a) / float(b):.2f}" if a is not None and b else "-"
        lines.append(f"  {label:<34}{cells[0]:>12}{cells[1]:>12}{ratio:>9}")
    for mode in MODES:
        if "error" in results.get(mode, {}):
            lines.append(f"error: {mode}: {str(results[mode]['error']).splitlines()[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one restart per mode")
    parser.add_argument("--restarts", type=int, help="restarts per mode")
    parser.add_argument("--rate", type=int, help="records/s")
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    overrides = {"restarts": args.restarts, "rate": args.rate}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench_run = Run("rolling-restart-bench", args.quick)
    results: dict[str, dict] = {}
    for mode in MODES:
        results[mode] = row = run_mode(mode == "on", settings)
        shown = row.get("error") or (
            f"longest gap {row['longest_ack_gap_s']:.3f} s, p99 {row['latency_p99_ms']:.1f} ms, "
            f"{row['delivery_errors']} errors"
        )
        print(f"  controlled shutdown {mode}: {shown}", flush=True)
    output = bench_run.write(asdict(settings), results, args.output,
                             broker_settings=BROKER_SETTINGS, cluster_size=CLUSTER_SIZE)
    print()
    print(render(results, settings))
    print(f"JSON: {output}")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
