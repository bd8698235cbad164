"""Broker CPU per replicated record, leader and followers apart, and where it goes.

    python bench/profile_replication.py [--seconds 6] [--py-spy] [--src OTHER/src ...]

A 3-broker cluster (ZooKeeper plus three `chronik serve`, as replication_bench.py
starts it) gets an RF=3 topic whose partitions all have broker 1 as leader and
brokers 2 and 3 as followers (an explicit replica assignment), and an RF=1 topic on
broker 1 alone. The same acks=all load (producer_load.py, Kafka's default 16 KB
batches) runs against each; each broker's CPU time (/proc, user + system) over the
measured part, divided by the records produced, is its CPU per record: broker 1's is
the leader's, brokers 2 and 3 the followers'. With ``--py-spy`` each broker is sampled
during the RF=3 load and its busiest functions printed. Then, with no load, one
producer at a fixed rate (``--latency-rate``, linger.ms 0, acks=all) times each record
on each topic: the p50 RF=3 adds over RF=1 is what replication adds to an
acknowledgement when nothing queues. With ``--src`` (repeatable)
each source tree gets its own cluster, started one after the other and measured in
alternating rounds (``--rounds``), so two revisions compare in one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from brokers import REPO  # noqa: E402
from producer_load import LoadSettings, run_load  # noqa: E402
from profile_broker import top  # noqa: E402
from replication_bench import ReplicatedCluster  # noqa: E402
from workloads import produce_latency  # noqa: E402


def create_led_by_one(bootstrap: str, name: str, partitions: int, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if len(replicas) > 1 else {}
    topic = NewTopic(name, partitions, replica_assignment=[replicas] * partitions,
                     config=config)
    admin.create_topics([topic])[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and all(
            p.leader == replicas[0] and len(p.isrs) == len(replicas)
            for p in meta.partitions.values()
        ) and len(meta.partitions) == partitions:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{name}: leaders and ISRs not up")


class CpuMeter:
    def __init__(self, cluster: ReplicatedCluster, spy_dir: Path | None) -> None:
        self.cluster = cluster
        self.spy_dir = spy_dir
        self.spies: list[subprocess.Popen] = []
        self.before: list[float] = []
        self.cpu: list[float] = []

    def start(self) -> None:
        if self.spy_dir is not None:
            py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            for broker in self.cluster.brokers:
                out = self.spy_dir / f"broker-{broker.node_id}.txt"
                self.spies.append(subprocess.Popen(
                    [py_spy, "record", "--pid", str(broker.proc.pid), "--rate", "200",
                     "--function", "--format", "raw", "--output", str(out), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
        self.before = [b.cpu_seconds() for b in self.cluster.brokers]

    def stop(self) -> None:
        brokers = self.cluster.brokers
        self.cpu = [b.cpu_seconds() - s for b, s in zip(brokers, self.before, strict=True)]
        for spy in self.spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        self.spies = []


def one_row(cluster: ReplicatedCluster, rf: int, args: argparse.Namespace,
            spy_dir: Path | None) -> dict[str, float]:
    topic = f"profile-repl-rf{rf}-{uuid.uuid4().hex[:6]}"
    create_led_by_one(cluster.bootstrap, topic, args.partitions, [1, 2, 3][:rf])
    settings = LoadSettings(
        producers=args.producers, acks="all", record_size=args.record_size,
        seconds=args.seconds, warmup_records=10_000, keys=1000, batch_size=16_384, linger_ms=5,
    )
    meter = CpuMeter(cluster, spy_dir)
    result = run_load(cluster.bootstrap, topic, settings, meter=meter)
    per = [c / result.records * 1e6 for c in meter.cpu]
    return {
        "records_per_s": result.records_per_s,
        "leader_us": per[0],
        "follower_us": (per[1] + per[2]) / 2 if rf > 1 else 0.0,
        "cpu_util": sum(meter.cpu) / result.seconds,
    }


def latency_row(cluster: ReplicatedCluster, rf: int, args: argparse.Namespace) -> dict[str, float]:
    topic = f"profile-repl-latency-rf{rf}-{uuid.uuid4().hex[:6]}"
    create_led_by_one(cluster.bootstrap, topic, 1, [1, 2, 3][:rf])
    result = produce_latency(
        cluster.bootstrap, topic, acks="all", record_size=args.record_size,
        rate=args.latency_rate, seconds=args.latency_seconds, warmup_records=200,
    )
    return {"p50_ms": result.p50_ms, "p99_ms": result.p99_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--py-spy", action="store_true")
    parser.add_argument("--latency-rate", type=int, default=500, help="records/s, no load")
    parser.add_argument("--latency-seconds", type=float, default=4.0, help="0: no latency rows")
    parser.add_argument("--src", type=Path, action="append",
                        help="a source tree to run the brokers from (default: this one's)")
    parser.add_argument("--quick", action="store_true", help="2 s per row, one round")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.latency_seconds = 2.0, 1, 1.0
    sources = args.src or [REPO / "src"]
    out = Path(tempfile.mkdtemp(prefix="chronik-profile-repl-"))
    print(f"load {os.getloadavg()}", flush=True)
    clusters: list[ReplicatedCluster] = []
    rows: dict[tuple[int, int], list[dict[str, float]]] = {}
    latencies: dict[tuple[int, int], list[dict[str, float]]] = {}
    try:
        for src in sources:
            cluster = ReplicatedCluster(src)
            cluster.start()
            clusters.append(cluster)
        for rnd in range(args.rounds):
            for i, cluster in enumerate(clusters):
                for rf in (1, 3):
                    spy = None
                    if args.py_spy and rf == 3 and rnd == 0:
                        spy = out / f"src{i}"
                        spy.mkdir(exist_ok=True)
                    row = one_row(cluster, rf, args, spy)
                    rows.setdefault((i, rf), []).append(row)
                    print(f"round {rnd} src{i} RF={rf}: {row['records_per_s']:,.0f} rec/s, "
                          f"leader {row['leader_us']:.1f} us/rec, follower "
                          f"{row['follower_us']:.1f} us/rec", flush=True)
                if args.latency_seconds > 0:
                    for rf in (1, 3):
                        lat = latency_row(cluster, rf, args)
                        latencies.setdefault((i, rf), []).append(lat)
                        print(f"round {rnd} src{i} RF={rf} alone @ {args.latency_rate}/s: "
                              f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms",
                              flush=True)
    finally:
        for cluster in clusters:
            cluster.stop()
    print(f"load {os.getloadavg()}")
    for i, src in enumerate(sources):
        one, three = rows.get((i, 1), []), rows.get((i, 3), [])
        if not one or not three:
            continue

        def med(rs: list[dict[str, float]], key: str) -> float:
            return statistics.median(r[key] for r in rs)

        print(f"src{i} {src}: RF3/RF1 {med(three, 'records_per_s') / med(one, 'records_per_s'):.2f}"
              f"  RF1 {med(one, 'records_per_s'):,.0f}/s  RF3 {med(three, 'records_per_s'):,.0f}/s"
              f"  leader us/rec RF1 {med(one, 'leader_us'):.1f} RF3 {med(three, 'leader_us'):.1f}"
              f"  follower us/rec {med(three, 'follower_us'):.1f}")
        l1, l3 = latencies.get((i, 1), []), latencies.get((i, 3), [])
        if l1 and l3:
            print(f"      alone: p50 RF1 {med(l1, 'p50_ms'):.2f} ms, RF3 {med(l3, 'p50_ms'):.2f} ms"
                  f" (+{med(l3, 'p50_ms') - med(l1, 'p50_ms'):.2f}); p99 RF1 "
                  f"{med(l1, 'p99_ms'):.2f}, RF3 {med(l3, 'p99_ms'):.2f}")
        if args.py_spy:
            for n in (1, 2, 3):
                path = out / f"src{i}" / f"broker-{n}.txt"
                if path.exists():
                    print(f"-- src{i} broker {n} ({'leader' if n == 1 else 'follower'})")
                    print(top(path, 25))
    return 0


if __name__ == "__main__":
    sys.exit(main())
