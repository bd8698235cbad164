"""What transactions cost on one chronik broker: transactional produce at 100 records per
transaction against the plain idempotent producer, and read_committed consume against
read_uncommitted, side by side in one run on the same broker.

    python bench/transactions_bench.py            # about a minute
    python bench/transactions_bench.py --quick    # smoke run
    python bench/transactions_bench.py --against ../main/src --runs 3   # A/B, ~4 minutes

One confluent-kafka producer (acks=all, lz4, linger.ms=5) writes N records of 100 bytes
with keys over a 6-partition topic: first idempotent, flushed at the end; then
transactional on another topic, committing every 100 records (each commit waits for
EndTxn and the markers on every partition of the transaction). Then one consumer reads
the transactional topic from the start, once read_uncommitted and once read_committed
(which stops at the last stable offset and skips the markers). Each figure is the best
of `--runs`. Prints a table and writes JSON to bench/results/.

The idempotent rate is measured from the producer's creation, its connection and producer
id included (as this bench always has), and also from once it has delivered a first
record, as the transactional producer is timed after init_transactions. The fixed cost
of a transaction is its wall time less the time the started idempotent producer takes
for the same 100 records: AddPartitionsToTxn, EndTxn, the markers and the coordinator's
writes, and whatever the client waits on between them. The broker's CPU per transaction
(all its threads, from /proc) is printed beside it.

`--against DIR` starts a second broker from another checkout's src/ (say the main
branch's) beside this one and alternates the rounds between the two (which goes first
changes every round), so both see the same machine load; the table then has a column
for each and their ratio.
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
from brokers import Chronik, CpuMeter  # noqa: E402

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


def produce_idempotent(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    """Records per second from the producer's creation (its connection and producer id
    included, as this bench has always measured it), and from once it is started (one
    record delivered), as the transactional producer is timed after init_transactions."""
    p = producer(bootstrap, **{"enable.idempotence": "true"})
    start = time.perf_counter()
    p.produce(topic, value=VALUE)
    assert p.flush(30) == 0
    startup = time.perf_counter() - start
    started = timed_produce(p, topic, count)
    return count / (startup + count / started), started


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


def transactional_with_cpu(broker: Chronik, topic: str, count: int) -> tuple[float, float]:
    """Records per second, and the broker's CPU milliseconds per transaction."""
    meter = CpuMeter(broker)
    meter.start()
    rate = produce_transactional(broker.bootstrap, topic, count)
    meter.stop()
    return rate, meter.cpu_s * 1000 / -(-count // PER_TRANSACTION)


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


def add_against(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--against", type=Path, metavar="DIR",
        help="another checkout's src/ to run beside this one, rounds alternating",
    )


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


def one_round(broker: Chronik, count: int, best: dict[str, list[float]]) -> None:
    plain, txn = f"plain-{uuid.uuid4().hex[:6]}", f"txn-{uuid.uuid4().hex[:6]}"
    create(broker.bootstrap, plain)
    create(broker.bootstrap, txn)
    cold, started = produce_idempotent(broker.bootstrap, plain, count)
    best.setdefault("idempotent", []).append(cold)
    best.setdefault("idempotent_started", []).append(started)
    rate, cpu_ms = transactional_with_cpu(broker, txn, count)
    best.setdefault("transactional", []).append(rate)
    best.setdefault("cpu_ms_per_transaction", []).append(cpu_ms)
    for isolation in ("read_uncommitted", "read_committed"):
        best.setdefault(isolation, []).append(consume(broker.bootstrap, txn, count, isolation))


def summary(best: dict[str, list[float]]) -> dict[str, float]:
    """Best of the runs (least CPU), and the per-transaction figures derived from them."""
    out = {k: (min(v) if k.startswith("cpu") else max(v)) for k, v in best.items()}
    out["transaction_ms"] = PER_TRANSACTION * 1000 / out["transactional"]
    out["fixed_cost_ms"] = (
        out["transaction_ms"] - PER_TRANSACTION * 1000 / out["idempotent_started"]
    )
    return out


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    args, count, runs = run_arguments(__doc__, 5_000, add_against)
    brokers = {"chronik": Chronik()}
    if args.against is not None:
        brokers["against"] = Chronik(name="against", src=args.against.resolve())
    best: dict[str, dict[str, list[float]]] = {name: {} for name in brokers}
    loads = [load()]
    try:
        for broker in brokers.values():
            broker.start()
        for run in range(runs):
            names = list(brokers)
            for name in names if run % 2 == 0 else names[::-1]:
                one_round(brokers[name], count, best[name])
        loads.append(load())
    finally:
        for broker in brokers.values():
            broker.stop()
    results = {name: summary(b) for name, b in best.items()}
    print(f"{count} records of {len(VALUE)} bytes, {PARTITIONS} partitions, best of {runs}; "
          f"load average {loads[0]} at the start, {loads[-1]} at the end")
    names = list(results)
    head = "".join(f"{n:>14}" for n in names) + ("   this/against" if len(names) > 1 else "")
    print(f"{'':36}{head}")
    rows = [
        ("produce, idempotent (records/s)", "idempotent", ",.0f"),
        ("  once the producer is started", "idempotent_started", ",.0f"),
        ("produce, 100 per transaction", "transactional", ",.0f"),
        ("  over idempotent", "transactional_over_idempotent", ".2f"),
        ("  over idempotent once started", "transactional_over_started", ".3f"),
        ("  ms per transaction", "transaction_ms", ".2f"),
        ("  fixed cost, ms per transaction", "fixed_cost_ms", ".2f"),
        ("  broker CPU, ms per transaction", "cpu_ms_per_transaction", ".2f"),
        ("consume, read_uncommitted", "read_uncommitted", ",.0f"),
        ("consume, read_committed", "read_committed", ",.0f"),
        ("  over read_uncommitted", "read_committed_over_read_uncommitted", ".2f"),
    ]
    for r in results.values():
        r["transactional_over_idempotent"] = r["transactional"] / r["idempotent"]
        r["transactional_over_started"] = r["transactional"] / r["idempotent_started"]
        r["read_committed_over_read_uncommitted"] = r["read_committed"] / r["read_uncommitted"]
    for label, key, fmt in rows:
        cells = "".join(f"{results[n][key]:>14{fmt}}" for n in names)
        ratio = ""
        if len(names) > 1:
            ratio = f"{results[names[0]][key] / results[names[1]][key]:>15.2f}"
        print(f"{label:36}{cells}{ratio}")
    mine = results["chronik"]
    ratios = {
        "transactional_over_idempotent": mine["transactional_over_idempotent"],
        "transactional_over_started": mine["transactional_over_started"],
        "read_committed_over_read_uncommitted": mine["read_committed_over_read_uncommitted"],
    }
    extra: dict[str, object] = {}
    if "against" in results:
        extra["against"] = {
            "src": str(args.against), "chronik": chronik_revision(args.against.resolve().parent),
            "records_per_s": {k: results["against"][k] for k in RATE_KEYS},
            "per_transaction": {k: results["against"][k] for k in PER_TXN_KEYS},
        }
    write_report(
        args, "transactions", records=count, runs=runs, load=loads,
        records_per_s={k: mine[k] for k in RATE_KEYS}, ratios=ratios,
        per_transaction={k: mine[k] for k in PER_TXN_KEYS}, **extra,
    )
    return 0


RATE_KEYS = (
    "idempotent", "idempotent_started", "transactional", "read_uncommitted", "read_committed"
)
PER_TXN_KEYS = ("transaction_ms", "fixed_cost_ms", "cpu_ms_per_transaction")


if __name__ == "__main__":
    raise SystemExit(main())
