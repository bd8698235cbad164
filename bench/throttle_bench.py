"""How closely a replication throttle holds a follower's catch-up to its rate, on one
3-broker chronik cluster: the achieved rate over the configured one, at a few rates,
beside the same catch-up unthrottled.

    python bench/throttle_bench.py            # a few minutes
    python bench/throttle_bench.py --quick    # smoke run, about a minute

For each row: a fresh topic of one partition, replication factor 3; one follower (never
the leader nor the controller) is stopped with SIGTERM; a backlog of about
``seconds`` x rate is produced with acks=all (incompressible 10 kB values, 1 MB batches);
then, as Kafka's reassignment tool sets a throttle, leader.replication.throttled.rate
and follower.replication.throttled.rate on every broker, the topic's
leader.replication.throttled.replicas naming the two running replicas and
follower.replication.throttled.replicas the stopped one, all through
IncrementalAlterConfigs. The follower is started again and its log's size sampled
every 10 ms until it holds the whole backlog. The steady rate is taken from the moment
it has the first quota window's allowance (one window's worth at the rate and a
fetch) to the end; the overall rate over the whole catch-up, from the last sample
before its first byte. The
unthrottled row does the same without a throttle. Prints a table and writes JSON to
bench/results/.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's chronik (for its ZooKeeper launcher), whatever else is installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "src"))

from bench_report import Run  # noqa: E402
from replication_bench import (  # noqa: E402
    BROKER_SETTINGS,
    ReplicatedChronik,
    ReplicatedCluster,
    partition_state,
    wait_for,
)
from workloads import create_topic  # noqa: E402

MB = 1 << 20
VALUE_SIZE = 10_000
FETCH_BYTES = 1 << 20  # replica.fetch.max.bytes: what one fetch may carry past the quota
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@dataclass(frozen=True)
class Settings:
    rates_mb: tuple[float, ...] = (1.0, 2.0, 4.0)
    seconds: float = 15.0  # the backlog: this long at the row's rate
    unthrottled_mb: int = 60


QUICK = Settings(rates_mb=(2.0,), seconds=6.0, unthrottled_mb=12)


def halt(broker: ReplicatedChronik) -> None:
    """SIGTERM, keeping its data (BrokerProcess.stop would remove it)."""
    if broker.proc is not None and broker.proc.poll() is None:
        broker.proc.send_signal(signal.SIGTERM)
        try:
            broker.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.proc.kill()
            broker.proc.wait()


def alter(bootstrap: str, kind: ConfigResource.Type, name: str,
          configs: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs: SET each config with a value, DELETE each with None. A
    client of its own each time: one that saw a broker leave the cluster's metadata
    waits for it by id until its metadata lists it again, which an idle admin client does
    not ask for."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None
        else ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE)
        for k, v in configs.items()
    ]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, total: int) -> None:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
        "batch.size": 1_000_000, "compression.type": "none", "enable.idempotence": False,
    })
    failed: list[object] = []
    payload = os.urandom(VALUE_SIZE)
    for i in range(total // VALUE_SIZE):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, partition=0,
                                 on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) or failed:
        raise RuntimeError(f"backlog not acknowledged: {failed[:3]}")


def log_bytes(partition_dir: Path) -> int:
    """How far a replica's log reaches, in bytes of its segment files (what a throttle
    counts)."""
    if not partition_dir.exists():
        return 0
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def catch_up(cluster: ReplicatedCluster, rate: int | None, backlog: int) -> dict[str, object]:
    """One row: a follower restarted behind ``backlog`` bytes, under ``rate`` (bytes/s,
    None for no throttle)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"throttle-bench-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, 1, replication_factor=3)
    wait_for(lambda: len(partition_state(admin, topic, 0)[1]) == 3, "a full ISR")
    leader = partition_state(admin, topic, 0)[0]
    controller = admin.list_topics(timeout=5).controller_id
    ids = [b.node_id for b in cluster.brokers]  # type: ignore[attr-defined]
    follower = next(b for b in ids if b not in (leader, controller))
    others = [b for b in ids if b != follower]
    if rate is not None:
        for b in ids:
            alter(cluster.broker(b).bootstrap, ConfigResource.Type.BROKER, str(b),
                  dict.fromkeys(RATES, str(rate)))
    victim = cluster.broker(follower)
    halt(victim)
    wait_for(lambda: follower not in partition_state(admin, topic, 0)[1],
             "the follower out of the ISR")
    produce(cluster.broker(leader).bootstrap, topic, backlog)
    leader_dir = cluster.broker(leader).workdir / "data" / f"{topic}-0"
    target = log_bytes(leader_dir)
    if rate is not None:
        alter(cluster.bootstrap, ConfigResource.Type.TOPIC, topic, {
            LISTS[0]: ",".join(f"0:{b}" for b in others),
            LISTS[1]: f"0:{follower}",
        })
    directory = victim.workdir / "data" / f"{topic}-0"
    started = time.monotonic()
    # Sampled while it starts: unthrottled, the whole backlog may come before start()
    # has seen it ready.
    starting = threading.Thread(target=victim.start, daemon=True)
    starting.start()
    samples: list[tuple[float, int]] = []
    deadline = started + 60 + backlog / (rate or MB)
    while True:
        now, size = time.monotonic(), log_bytes(directory)
        samples.append((now, size))
        if size >= target:
            break
        if now > deadline:
            raise TimeoutError(f"follower at {size} of {target} bytes")
        time.sleep(0.01)
    done = samples[-1][0]
    starting.join(60)
    # The quota window's first allowance: a window's worth at the rate, and one fetch.
    allowance = (rate or 0) + FETCH_BYTES
    first = next((s for s in samples if s[1] >= allowance), samples[0])
    steady = (target - first[1]) / (done - first[0]) if done > first[0] else None
    first_byte = next((t for t, b in samples if b > 0), started)
    # Timed from the last sample that saw nothing: an unthrottled follower may take the
    # whole backlog between two samples, which then still spans one interval.
    before_first = max((t for t, b in samples if b == 0), default=started)
    row: dict[str, object] = {
        "configured_bytes_per_s": rate,
        "backlog_bytes": target,
        "restart_to_first_byte_s": first_byte - started,
        "catch_up_s": done - first_byte,
        "overall_bytes_per_s": target / max(done - before_first, 1e-6),
        "steady_bytes_per_s": steady,
        "samples": len(samples),
    }
    if rate is not None and steady is not None:
        row["steady_ratio"] = steady / rate
        row["overall_ratio"] = float(row["overall_bytes_per_s"] or 0) / rate  # type: ignore[arg-type]
        alter(cluster.bootstrap, ConfigResource.Type.TOPIC, topic, dict.fromkeys(LISTS))
        for b in ids:
            alter(cluster.broker(b).bootstrap, ConfigResource.Type.BROKER, str(b),
                  dict.fromkeys(RATES))
    wait_for(lambda: len(partition_state(admin, topic, 0)[1]) == 3, "the follower back in the ISR")
    admin.delete_topics([topic])
    return row


def render(rows: dict[str, dict[str, object]]) -> str:
    lines = [
        "follower catch-up, 1 partition, RF 3     configured   steady MB/s  ratio"
        "   overall MB/s  ratio   catch-up s"
    ]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"  {name:<38} error: {str(row['error']).splitlines()[0]}")
            continue
        rate = row["configured_bytes_per_s"]
        configured = "-" if rate is None else f"{int(rate) / MB:.1f} MB/s"  # type: ignore[call-overload]

        def mb(key: str, row: dict[str, object] = row) -> str:
            value = row.get(key)
            return "-" if value is None else f"{float(value) / MB:.2f}"  # type: ignore[arg-type]

        def ratio(key: str, row: dict[str, object] = row) -> str:
            value = row.get(key)
            return "-" if value is None else f"{float(value):.2f}"  # type: ignore[arg-type]

        lines.append(
            f"  {name:<38}{configured:>11}  {mb('steady_bytes_per_s'):>11}  "
            f"{ratio('steady_ratio'):>5}  {mb('overall_bytes_per_s'):>13}  "
            f"{ratio('overall_ratio'):>5}  {float(row['catch_up_s']):>11.2f}"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one rate, a small backlog")
    parser.add_argument("--rates", help="comma-separated throttles in MB/s")
    parser.add_argument("--seconds", type=float, help="backlog: this many seconds at the rate")
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    if args.rates:
        settings = replace(settings, rates_mb=tuple(float(r) for r in args.rates.split(",")))
    if args.seconds:
        settings = replace(settings, seconds=args.seconds)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench_run = Run("throttle-bench", args.quick)
    cluster = ReplicatedCluster()
    rows: dict[str, dict[str, object]] = {}
    try:
        cluster.start()
        print(f"cluster: {cluster.bootstrap}", flush=True)
        plan: list[tuple[str, int | None, int]] = [
            (f"throttle {mb:g} MB/s", int(mb * MB), int(mb * MB * settings.seconds))
            for mb in settings.rates_mb
        ]
        plan.append(("unthrottled", None, settings.unthrottled_mb * MB))
        for name, rate, backlog in plan:
            try:
                rows[name] = catch_up(cluster, rate, backlog)
            except Exception as exc:  # one failing row must not hide the others' figures
                rows[name] = {"error": f"{type(exc).__name__}: {exc}"}
                if not cluster.alive():
                    rows[name]["error"] = f"{rows[name]['error']}\n{cluster.log_tail()}"
            print(render({name: rows[name]}).splitlines()[-1], flush=True)
    finally:
        cluster.stop()
    output = bench_run.write(asdict(settings), rows, args.output, broker_settings=BROKER_SETTINGS)
    print()
    print(render(rows))
    print(f"JSON: {output}")
    return 1 if any("error" in r for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
