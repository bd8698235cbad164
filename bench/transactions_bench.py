"""What transactions cost on one chronik broker: transactional produce at 100 records per
transaction against the plain idempotent producer, and read_committed consume against
read_uncommitted, side by side in one run on the same broker.

    python bench/transactions_bench.py            # about a minute
    python bench/transactions_bench.py --quick    # smoke run

One confluent-kafka producer (acks=all, lz4, linger.ms=5) writes N records of 100 bytes
with keys over a 6-partition topic: first idempotent, flushed at the end; then
transactional on another topic, committing every 100 records (each commit waits for
EndTxn and the markers on every partition of the transaction). Then one consumer reads
the transactional topic from the start, once read_uncommitted and once read_committed
(which stops at the last stable offset and skips the markers). Each figure is the best
of `--runs`. Prints a table and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import chronik_revision, machine  # noqa: E402
from brokers import Chronik  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PARTITIONS = 6
PER_TRANSACTION = 100
VALUE = b"x" * 100


def create(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def producer(bootstrap: str, **extra: str) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "compression.type": "lz4",
        "linger.ms": 5, "queue.buffering.max.messages": 1_000_000, **extra,
    })


def produce_idempotent(bootstrap: str, topic: str, count: int) -> float:
    return timed_produce(producer(bootstrap, **{"enable.idempotence": "true"}), topic, count)


def timed_produce(p: Producer, topic: str, count: int, value: bytes = VALUE) -> float:
    """Records per second for ``count`` keyed records, flushed at the end."""
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % 1000), value=value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return count / (time.perf_counter() - start)


def produce_transactional(bootstrap: str, topic: str, count: int) -> float:
    p = producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    start = time.perf_counter()
    for first in range(0, count, PER_TRANSACTION):
        p.begin_transaction()
        for i in range(first, min(first + PER_TRANSACTION, count)):
            p.produce(topic, key=b"k%d" % (i % 1000), value=VALUE)
        p.commit_transaction(60)
    return count / (time.perf_counter() - start)


def consume(bootstrap: str, topic: str, count: int, isolation: str) -> float:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "fetch.max.bytes": 52428800,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < count and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(10_000, 0.5) if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    if got < count:
        raise RuntimeError(f"{isolation}: read {got} of {count}")
    return count / elapsed


def run_arguments(
    doc: str, quick_records: int, extend: Callable[[argparse.ArgumentParser], None] | None = None
) -> tuple[argparse.Namespace, int, int]:
    """--quick, --records, --runs, --output (and what ``extend`` adds): the options, the
    record count and runs."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--output", type=Path)
    if extend is not None:
        extend(parser)
    args = parser.parse_args()
    count = args.records or (quick_records if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 2)
    return args, count, runs


def write_report(args: argparse.Namespace, name: str, **figures: object) -> None:
    """The run's figures as JSON, with the machine and chronik's revision."""
    report = {
        "mode": "quick" if args.quick else "full",
        **figures,
        "machine": machine(),
        "chronik": chronik_revision(),
    }
    output = args.output or RESULTS_DIR / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))


def main() -> int:
    args, count, runs = run_arguments(__doc__, 5_000)
    broker = Chronik()
    broker.start()
    results: dict[str, float] = {}
    try:
        best: dict[str, list[float]] = {}
        for _ in range(runs):
            plain, txn = f"plain-{uuid.uuid4().hex[:6]}", f"txn-{uuid.uuid4().hex[:6]}"
            create(broker.bootstrap, plain)
            create(broker.bootstrap, txn)
            best.setdefault("idempotent", []).append(
                produce_idempotent(broker.bootstrap, plain, count))
            best.setdefault("transactional", []).append(
                produce_transactional(broker.bootstrap, txn, count))
            for isolation in ("read_uncommitted", "read_committed"):
                best.setdefault(isolation, []).append(
                    consume(broker.bootstrap, txn, count, isolation))
        results = {k: max(v) for k, v in best.items()}
    finally:
        broker.stop()
    ratios = {
        "transactional_over_idempotent": results["transactional"] / results["idempotent"],
        "read_committed_over_read_uncommitted":
            results["read_committed"] / results["read_uncommitted"],
    }
    print(f"{count} records of {len(VALUE)} bytes, {PARTITIONS} partitions, best of {runs}")
    print(f"{'':34}{'records/s':>12}")
    print(f"{'produce, idempotent':34}{results['idempotent']:>12,.0f}")
    print(f"{'produce, 100 per transaction':34}{results['transactional']:>12,.0f}"
          f"   {ratios['transactional_over_idempotent']:.2f}x")
    print(f"{'consume, read_uncommitted':34}{results['read_uncommitted']:>12,.0f}")
    print(f"{'consume, read_committed':34}{results['read_committed']:>12,.0f}"
          f"   {ratios['read_committed_over_read_uncommitted']:.2f}x")
    write_report(
        args, "transactions", records=count, runs=runs, records_per_s=results, ratios=ratios
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
