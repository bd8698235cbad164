"""What replication costs and how fast a failover is, on one 3-broker chronik cluster:
acks=all produce throughput and latency with replication factor 3 against 1, and the
time from a leader's kill -9 to the first record acknowledged by its successor.

    python bench/replication_bench.py            # a few minutes
    python bench/replication_bench.py --quick    # smoke run, about a minute

The cluster is a local ZooKeeper plus three `chronik serve` processes (broker.id 1..3),
as in cluster_bench.py. Each replication factor gets its own 12-partition topic
(min.insync.replicas 2 for RF 3) on the same running cluster and the same load:
several producer processes (producer_load.py) flat out with acks=all, while a light
fixed-rate producer in its own process (latency_probe.py) times each record's round
trip. A row's topic is deleted once measured, so that no row inherits another's page
cache. Then, a few times over: a partition's leader (never the controller) is killed
with SIGKILL while a producer sends one record at a time to that partition; the figure
is the time from the kill to the first acknowledgement, which now comes from the new
leader. The victim is restarted and rejoins the ISR before the next kill. Prints a
table and writes JSON to bench/results/.

    python bench/replication_bench.py --baseline ../main --rounds 3

compares two revisions in one run: a second cluster runs from another checkout's src/,
both stay up, and the rows alternate between them round by round (the order flipped each
round, so drifting machine load hits both alike); each figure is the median of its
rounds, with chronik/baseline ratios. The failover part runs on this checkout's cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's chronik (for its ZooKeeper launcher), whatever else is installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from broker_bench import chronik_revision, machine  # noqa: E402
from brokers import free_port  # noqa: E402
from cluster_bench import CLUSTER_SIZE, ClusterChronik, Setup  # noqa: E402
from latency_probe import LatencyProbe  # noqa: E402
from producer_load import LoadSettings, run_load  # noqa: E402
from workloads import create_topic, delete_topics  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
FACTORS = (1, 3)
# Kafka's default is 18 s; the failover time is bounded below by it (a dead broker is
# noticed when its ZooKeeper session expires), so the bench states what it used.
BROKER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
}


@dataclass(frozen=True)
class Settings:
    producers: int = 3
    partitions: int = 12
    record_size: int = 1000
    seconds: float = 8.0
    warmup_records: int = 20_000
    keys: int = 1000
    batch_size: int = 16_384
    linger_ms: int = 5
    probe_rate: int = 200
    kills: int = 3

    def load(self) -> LoadSettings:
        return LoadSettings(
            producers=self.producers,
            acks="all",
            record_size=self.record_size,
            seconds=self.seconds,
            warmup_records=self.warmup_records,
            keys=self.keys,
            batch_size=self.batch_size,
            linger_ms=self.linger_ms,
        )


QUICK = Settings(producers=2, seconds=1.5, warmup_records=2_000, kills=1)


class ReplicatedChronik(ClusterChronik):
    """A cluster broker with the bench's broker settings; restartable after a kill."""

    def command(self) -> list[str]:
        extra = [arg for k, v in BROKER_SETTINGS.items() for arg in ("--set", f"{k}={v}")]
        return [*super().command(), *extra]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class ReplicatedCluster(Setup):
    """The cluster, its brokers run from ``src`` (another checkout's, to compare two
    revisions in one run) or from this checkout's."""

    def __init__(self, src: Path | None = None) -> None:
        super().__init__("cluster")
        self.src = src

    def start(self) -> None:
        from chronik.cluster.zookeeper_process import ZooKeeperProcess

        self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", free_port()).start()
        chroot = f"{self.zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}"
        self.brokers = [
            ReplicatedChronik(n, chroot, self.workdir / f"broker-{n}", self.src)
            for n in range(1, CLUSTER_SIZE + 1)
        ]
        for broker in self.brokers:
            broker.start()
        self._wait_for_members(len(self.brokers))

    def broker(self, node_id: int) -> ReplicatedChronik:
        return self.brokers[node_id - 1]  # type: ignore[return-value]


class ProbeMeter:
    """Starts the latency probe when the load's producers start, stops it with them, and
    takes the brokers' CPU time (user + system) over the same span."""

    def __init__(self, probe: LatencyProbe, cluster: ReplicatedCluster) -> None:
        self.probe = probe
        self.cluster = cluster
        self.cpu_s = 0.0

    def start(self) -> None:
        self.cpu_s = -sum(b.cpu_seconds() for b in self.cluster.brokers)
        self.probe.go()

    def stop(self) -> None:
        self.probe.stop()
        self.cpu_s += sum(b.cpu_seconds() for b in self.cluster.brokers)


def measure(cluster: ReplicatedCluster, settings: Settings, rf: int) -> dict[str, object]:
    topic = f"replication-bench-rf{rf}-{uuid.uuid4().hex[:6]}"
    config = {"min.insync.replicas": "2"} if rf >= 2 else {}
    try:
        leaders = create_topic(
            cluster.bootstrap, topic, settings.partitions, replication_factor=rf, config=config
        )
        with LatencyProbe(
            cluster.bootstrap, topic, acks="all", record_size=settings.record_size,
            rate=settings.probe_rate, seconds=settings.seconds,
        ) as probe:
            meter = ProbeMeter(probe, cluster)
            result = run_load(cluster.bootstrap, topic, settings.load(), meter=meter)
            latency = probe.result()
    except Exception as exc:  # one failing row must not hide the other's figures
        row: dict[str, object] = {"error": f"{type(exc).__name__}: {exc}"}
        if not cluster.alive():
            row["error"] = f"{row['error']} (a broker exited)\n{cluster.log_tail()}"
        return row
    finally:
        # Each row starts from the same page cache: the next row's writes reuse the
        # pages this one's files free instead of growing the cache. On a VM whose host
        # backs guest memory lazily, a page cache grown by gigabytes made every later
        # row's writes several times dearer (RF=3, writing three times the bytes, the
        # most), which the rows would have charged to the brokers.
        delete_topics(cluster.bootstrap, [topic])
    return {
        **result.as_dict(settings.record_size),
        "latency_p50_ms": latency.p50_ms,
        "latency_p99_ms": latency.p99_ms,
        "latency_samples": latency.samples,
        # Every broker's CPU (the probe's records included) per record of the load.
        "broker_us_per_record": meter.cpu_s / result.records * 1e6 if result.records else 0.0,
        "client_us_per_record": (
            result.client_cpu_s / result.records * 1e6 if result.records else 0.0
        ),
        "leaders_per_broker": leaders,
    }


def partition_state(admin: AdminClient, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader, ISR) as the cluster's Metadata reports them."""
    meta = admin.list_topics(topic, timeout=5).topics[topic].partitions[partition]
    return meta.leader, list(meta.isrs)


def wait_for(predicate, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # a cluster in transition answers with errors
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not within {timeout_s}s")


def failover_once(cluster: ReplicatedCluster, topic: str, partitions: int) -> dict[str, object]:
    """Kill a partition's leader (not the controller) and time the first acknowledgement
    after it, with one record in flight at a time."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    controller = admin.list_topics(timeout=5).controller_id
    partition, victim = next(
        (p, leader)
        for p in range(partitions)
        if (leader := partition_state(admin, topic, p)[0]) != controller
    )
    delivered: list[tuple[float, object]] = []
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 0,
        "message.timeout.ms": 120_000,
    })

    def send_one() -> float:
        delivered.clear()
        producer.produce(
            topic, b"x", partition=partition,
            on_delivery=lambda err, msg: delivered.append((time.perf_counter(), err)),
        )
        if producer.flush(120) or not delivered or delivered[0][1] is not None:
            raise RuntimeError(f"record to partition {partition} not acknowledged: {delivered}")
        return delivered[0][0]

    send_one()  # the connection to the leader is up
    cluster.broker(victim).kill()
    killed = time.perf_counter()
    acked = send_one()
    new_leader = partition_state(admin, topic, partition)[0]
    cluster.broker(victim).start()
    wait_for(
        lambda: all(
            victim in partition_state(admin, topic, p)[1] for p in range(partitions)
        ),
        f"broker {victim} back in every ISR",
    )
    return {
        "partition": partition,
        "victim": victim,
        "new_leader": new_leader,
        "kill_to_first_ack_s": acked - killed,
    }


def failovers(cluster: ReplicatedCluster, settings: Settings) -> dict[str, object]:
    topic = f"replication-bench-failover-{uuid.uuid4().hex[:6]}"
    partitions = 3
    try:
        create_topic(cluster.bootstrap, topic, partitions, replication_factor=3,
                     config={"min.insync.replicas": "2"})
        runs = [failover_once(cluster, topic, partitions) for _ in range(settings.kills)]
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    times = [float(r["kill_to_first_ack_s"]) for r in runs]
    return {"median_s": statistics.median(times), "runs": runs}


KEYS = ("records_per_s", "latency_p50_ms", "latency_p99_ms", "broker_us_per_record",
        "client_us_per_record")


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' rows as one: each figure the median of the rounds without an error."""
    good = [r for r in rows if "error" not in r]
    if not good:
        return rows[-1] if rows else {"error": "not run"}
    merged = dict(good[-1])
    for key in (*KEYS, "mb_per_s", "client_cores"):
        if key in good[0]:
            merged[key] = statistics.median(float(r[key]) for r in good)
    merged["rounds"] = [{k: r.get(k) for k in (*KEYS, "error") if k in r} for r in rows]
    return merged


def rf_ratios(results: dict[str, dict]) -> dict[str, float | None]:
    def ratio(key: str) -> float | None:
        one, three = results.get("rf-1", {}).get(key), results.get("rf-3", {}).get(key)
        return float(three) / float(one) if one and three else None

    return {k: ratio(k) for k in KEYS}


def render(results: dict[str, dict], ratios: dict[str, float | None], failover: dict,
           baseline: dict[str, Any] | None = None) -> str:
    lines = ["acks=all, 12 partitions, 3 brokers   RF=1          RF=3          RF3/RF1"]
    tables = [("", results, ratios)]
    if baseline is not None:
        lines[0] = "chronik (this checkout)" + lines[0][len("chronik (this checkout)"):]
        tables.append(("baseline ", baseline["results"], baseline["ratios_rf3_over_rf1"]))
    for prefix, rows, rf_ratio in tables:
        if prefix:
            lines.append(f"{prefix}({baseline['version'] if baseline else ''})")
        for key, label, fmt in (
            ("records_per_s", "records/s", "{:,.0f}"),
            ("latency_p50_ms", "latency p50 ms", "{:.2f}"),
            ("latency_p99_ms", "latency p99 ms", "{:.2f}"),
            ("broker_us_per_record", "broker CPU us/record (all 3)", "{:.1f}"),
            ("client_us_per_record", "producers' CPU us/record", "{:.1f}"),
        ):
            cells = []
            for rf in FACTORS:
                row = rows.get(f"rf-{rf}", {})
                cells.append(fmt.format(row[key]) if key in row else "-")
            ratio = rf_ratio.get(key)
            lines.append(
                f"  {label:<35}{cells[0]:>12}  {cells[1]:>12}  "
                f"{'-' if ratio is None else f'{ratio:.2f}':>8}"
            )
    if baseline is not None:
        lines.append("chronik/baseline (throughput: >1 faster; latency, CPU: <1 faster)")
        for key in KEYS:
            cells = []
            for rf in FACTORS:
                ours = results.get(f"rf-{rf}", {}).get(key)
                theirs = baseline["results"].get(f"rf-{rf}", {}).get(key)
                cells.append(f"{float(ours) / float(theirs):.2f}" if ours and theirs else "-")
            lines.append(f"  {key:<35}{cells[0]:>12}  {cells[1]:>12}")
    if "error" in failover:
        lines.append(f"failover: error: {failover['error'].splitlines()[0]}")
    elif "median_s" in failover:
        each = ", ".join(f"{r['kill_to_first_ack_s']:.2f}" for r in failover["runs"])
        lines.append(
            f"failover, kill -9 of a leader to the first ack on the new one: median "
            f"{failover['median_s']:.2f} s ({each}; zookeeper.session.timeout.ms "
            f"{BROKER_SETTINGS['zookeeper.session.timeout.ms']})"
        )
    lines.extend(
        f"error: rf-{rf}: {str(results[f'rf-{rf}']['error']).splitlines()[0]}"
        for rf in FACTORS
        if "error" in results.get(f"rf-{rf}", {})
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per row, one kill")
    parser.add_argument("--seconds", type=float, help="measured produce time per row")
    parser.add_argument("--producers", type=int, help="producer processes")
    parser.add_argument("--kills", type=int, help="leader kills timed (0: none)")
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    parser.add_argument(
        "--baseline", type=Path,
        help="another chronik checkout (its src/ is used) run as a second cluster beside "
        "this one, rows alternating: a change measured before and after in one run",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rows per cluster and factor")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "src" / "chronik").is_dir():
        parser.error(f"--baseline {args.baseline}: no src/chronik there")

    settings = QUICK if args.quick else Settings()
    overrides = {"seconds": args.seconds, "producers": args.producers, "kills": args.kills}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    load_at_start = os.getloadavg()
    clusters = {"chronik": ReplicatedCluster()}
    if args.baseline is not None:
        clusters["baseline"] = ReplicatedCluster(args.baseline.resolve() / "src")
    rounds: dict[str, dict[str, list[dict]]] = {name: {} for name in clusters}
    failover: dict[str, Any] = {}
    try:
        for name, cluster in clusters.items():
            cluster.start()
            print(f"{name} cluster: {cluster.bootstrap}", flush=True)
        for index in range(max(args.rounds, 1)):
            order = list(clusters.items())
            if index % 2:
                order.reverse()
            for name, cluster in order:
                for rf in FACTORS:
                    row = measure(cluster, settings, rf)
                    rounds[name].setdefault(f"rf-{rf}", []).append(row)
                    shown = row.get("error") or (
                        f"{row['records_per_s']:,.0f} records/s, p50 "
                        f"{row['latency_p50_ms']:.2f} ms, p99 {row['latency_p99_ms']:.2f} ms, "
                        f"brokers {row['broker_us_per_record']:.1f} us/record"
                    )
                    print(f"  round {index} {name:<8} RF={rf}: {shown}", flush=True)
        if settings.kills > 0:
            failover = failovers(clusters["chronik"], settings)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    load_at_end = os.getloadavg()

    merged = {
        name: {key: median_row(rows) for key, rows in by_rf.items()}
        for name, by_rf in rounds.items()
    }
    results = merged["chronik"]
    ratios = rf_ratios(results)
    baseline = None
    if "baseline" in merged:
        baseline = {
            "version": chronik_revision(args.baseline),
            "results": merged["baseline"],
            "ratios_rf3_over_rf1": rf_ratios(merged["baseline"]),
        }
    report = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "mode": "quick" if args.quick else "full",
        "settings": asdict(settings),
        "broker_settings": BROKER_SETTINGS,
        "cluster_size": CLUSTER_SIZE,
        "rounds": args.rounds,
        "version": chronik_revision(),
        "machine": {
            **machine(),
            "load_avg_at_start": load_at_start,
            "load_avg_at_end": load_at_end,
        },
        "results": results,
        "ratios_rf3_over_rf1": ratios,
        "failover": failover,
    }
    if baseline is not None:
        report["baseline"] = baseline
    output = args.output or RESULTS_DIR / time.strftime(
        f"replication-bench-%Y%m%d-%H%M%S{'-quick' if args.quick else ''}.json",
        time.gmtime(started),
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")

    print()
    print(render(results, ratios, failover, baseline))
    print(f"JSON: {output}")
    failed = "error" in failover or any(
        "error" in r for by_rf in merged.values() for r in by_rf.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
