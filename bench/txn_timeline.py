"""Where the time of one transaction goes: a timeline of librdkafka's transactions on one
chronik broker, split into the steps the client waits for in turn.

    python bench/txn_timeline.py                          # 400 transactions, ~10 s
    python bench/txn_timeline.py --quick                  # smoke run
    python bench/txn_timeline.py --against ../main/src --rounds 3   # A/B, rounds alternating
    python bench/txn_timeline.py --no-fsync --rounds 3    # the disk's share, see below

The broker runs with probes (this file, `--broker`): the monotonic time at which each
request arrives (its API key and connection) and each response is written. The client
(this file, `--client`, another process) runs transactions as transactions_bench.py does
(confluent-kafka, acks=all, lz4, linger.ms=5, 100 records of 100 bytes with keys over 6
partitions, commit_transaction), noting when each begins and when its commit returns.
Both use the same clock (CLOCK_MONOTONIC), so one transaction splits into:

    A  client: begin -> AddPartitionsToTxn arrives (librdkafka registers partitions
       on a 1 ms timer after the first record)
    B  broker: AddPartitionsToTxn arrives -> answered
    C  client: -> the first Produce arrives
    D  produce: the first Produce arrives -> the last one is answered (5 in flight at
       most per connection for an idempotent producer: 6 partitions take two rounds)
    E  client: -> EndTxn arrives
    F  broker: EndTxn arrives -> answered (PrepareCommit durable)
    G  client: -> commit_transaction returns

and, off that path unless the next AddPartitionsToTxn has to wait for them, the
coordinator's markers and completion after EndTxn is answered. Prints p50 and mean of
each step in microseconds (the first 10 transactions left out) and writes JSON to
bench/results/. The probes cost a little broker time of their own: compare steps and
revisions, not the total against transactions_bench.py.

`--no-fsync` runs a second broker of this checkout beside the first whose group-commit
fsyncs return at once (handed to their thread and back as always, the disk left out):
what is left of each step is the broker's and the client's own time. A diagnostic
only: that broker acknowledges what is not on disk.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve()
RESULTS_DIR = HERE.parent / "results"
PARTITIONS = 6
PER_TRANSACTION = 100
SKIPPED = 10
PRODUCE, ADD_PARTITIONS, END_TXN = 0, 24, 26
STEPS = {
    "A": "client: begin -> AddPartitionsToTxn arrives",
    "B": "broker: AddPartitionsToTxn answered",
    "C": "client: -> first Produce arrives",
    "D": "produce rounds: first arrives -> last answered",
    "E": "client: -> EndTxn arrives",
    "F": "broker: EndTxn answered",
    "G": "client: -> commit_transaction returns",
    "total": "one transaction",
    "markers": "markers and completion, after EndTxn",
}


# -- in the broker process ----------------------------------------------------------------
def run_broker(argv: list[str]) -> int:
    """chronik's command line with the probes installed; events to $TIMELINE_OUT."""
    import asyncio

    events: list[tuple[int, str, str]] = []
    clock = time.perf_counter_ns

    def dump(*_: object) -> None:
        with open(os.environ["TIMELINE_OUT"], "w") as out:
            out.writelines(f"{t} {kind} {detail}\n" for t, kind, detail in events)

    atexit.register(dump)
    signal.signal(signal.SIGUSR1, dump)
    if os.environ.get("TIMELINE_NO_FSYNC"):
        from chronik.storage import group_commit

        group_commit._fdatasync = lambda segment: None  # type: ignore[assignment]

    from chronik.broker import connection

    start = connection.Connection._start

    def arrived(self, data, previous):  # type: ignore[no-untyped-def]
        (api_key,) = struct.unpack_from(">h", data, 0)
        events.append((clock(), "arrive", f"{api_key} {self.peer}"))
        return start(self, data, previous)

    connection.Connection._start = arrived  # type: ignore[method-assign]
    writelines = asyncio.StreamWriter.writelines

    def written(self, data):  # type: ignore[no-untyped-def]
        peer = self.get_extra_info("peername")
        events.append((clock(), "write", f"{peer[0]}:{peer[1]}" if peer else "?"))
        return writelines(self, data)

    asyncio.StreamWriter.writelines = written  # type: ignore[method-assign]
    try:
        from chronik.coordinator.transaction_coordinator import TransactionCoordinator

        finish = TransactionCoordinator._finish

        async def finishing(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            events.append((clock(), "finish>", ""))
            try:
                return await finish(self, *args, **kwargs)
            finally:
                events.append((clock(), "finish<", ""))

        TransactionCoordinator._finish = finishing  # type: ignore[method-assign]
    except (ImportError, AttributeError):
        pass
    from chronik.cli.main import main as chronik_main

    sys.argv = ["chronik", *argv]
    return int(chronik_main() or 0)


# -- in the client process ----------------------------------------------------------------
def run_client(bootstrap: str, count: int, out: str) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"timeline-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "compression.type": "lz4",
        "linger.ms": 5, "transactional.id": f"timeline-{uuid.uuid4().hex[:8]}",
    })
    producer.init_transactions(30)
    value = b"x" * 100
    events: list[tuple[int, str]] = []
    clock = time.perf_counter_ns
    for n in range(count):
        events.append((clock(), "begin"))
        producer.begin_transaction()
        for i in range(PER_TRANSACTION):
            producer.produce(topic, key=b"k%d" % ((n * PER_TRANSACTION + i) % 1000), value=value)
        producer.commit_transaction(60)
    events.append((clock(), "begin"))
    with open(out, "w") as f:
        f.writelines(f"{t} {kind} -\n" for t, kind in events)
    return 0


# -- the run ------------------------------------------------------------------------------
def one_round(src: Path, count: int, no_fsync: bool = False) -> dict[str, list[float]]:
    sys.path.insert(0, str(HERE.parent))
    from brokers import Chronik

    class Probed(Chronik):
        def command(self) -> list[str]:
            return [sys.executable, str(HERE), "--broker", *super().command()[3:]]

        def env(self) -> dict[str, str]:
            env = {**super().env(), "TIMELINE_OUT": str(self.workdir / "broker.events")}
            if no_fsync:
                env["TIMELINE_NO_FSYNC"] = "1"
            return env

    broker = Probed(name="timeline", src=src)
    broker.start()
    client_events = broker.workdir / "client.events"
    try:
        subprocess.run(
            [sys.executable, str(HERE), "--client", broker.bootstrap, str(count),
             str(client_events)],
            check=True, timeout=60 + count,
        )
        if broker.proc is not None:
            broker.proc.send_signal(signal.SIGTERM)
            broker.proc.wait(20)
        events = []
        for name in ("broker.events", "client.events"):
            for line in (broker.workdir / name).read_text().splitlines():
                t, kind, detail = line.split(" ", 2)
                events.append((int(t), kind, detail))
    finally:
        broker.stop()
    events.sort()
    return steps(events)


def steps(events: list[tuple[int, str, str]]) -> dict[str, list[float]]:
    """Each step's duration (µs) per transaction, from the merged timeline."""
    begins = [i for i, e in enumerate(events) if e[1] == "begin"]
    out: dict[str, list[float]] = {k: [] for k in STEPS}
    for n in range(SKIPPED, len(begins) - 1):
        part = events[begins[n] : begins[n + 1] + 1]
        t0, end = part[0][0], part[-1][0]

        def arrival(api: int, part=part) -> tuple[int, str] | None:
            for t, kind, detail in part:
                if kind == "arrive" and detail.startswith(f"{api} "):
                    return t, detail.split()[1]
            return None

        add, end_txn, produce = arrival(ADD_PARTITIONS), arrival(END_TXN), arrival(PRODUCE)
        if add is None or end_txn is None or produce is None:
            continue

        def first_write(peer: str, after: int, part=part) -> int | None:
            return next((t for t, k, d in part if k == "write" and d == peer and t > after), None)

        add_done = first_write(add[1], add[0])
        end_done = first_write(end_txn[1], end_txn[0])
        produced = [t for t, k, d in part if k == "write" and d == produce[1] and t < end_txn[0]]
        if add_done is None or end_done is None or not produced:
            continue
        marks = [add[0], add_done, produce[0], produced[-1], end_txn[0], end_done]
        for key, (a, b) in zip("ABCDEFG", zip([t0, *marks], [*marks, end], strict=True),
                               strict=True):
            out[key].append((b - a) / 1000)
        out["total"].append((end - t0) / 1000)
        nxt = events[begins[n + 1] : begins[n + 2] + 1] if n + 2 < len(begins) else []
        finished = [t for t, k, _ in part + nxt if k == "finish<" and t > end_done]
        if finished:
            out["markers"].append((finished[0] - end_done) / 1000)
    return out


def summary(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        k: {"p50_us": statistics.median(v), "mean_us": statistics.mean(v), "n": len(v)}
        for k, v in samples.items() if v
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--broker":
        return run_broker(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        return run_client(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--transactions", type=int)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="another checkout's src/ to run beside this one, rounds alternating")
    parser.add_argument("--no-fsync", action="store_true",
                        help="beside this checkout, the same with fsyncs that return at once")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    count = args.transactions or (40 if args.quick else 400)
    sides = {"chronik": HERE.parent.parent / "src"}
    if args.against is not None:
        sides["against"] = args.against.resolve()
    if args.no_fsync:
        sides["no-fsync"] = sides["chronik"]
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    loads = [Path("/proc/loadavg").read_text().split()[0]]
    for n in range(args.rounds):
        names = list(sides) if n % 2 == 0 else list(sides)[::-1]
        for name in names:
            for key, values in one_round(sides[name], count, name == "no-fsync").items():
                samples[name].setdefault(key, []).extend(values)
    loads.append(Path("/proc/loadavg").read_text().split()[0])
    results = {name: summary(s) for name, s in samples.items()}
    print(f"{count} transactions of {PER_TRANSACTION} records x {args.rounds} round(s) per "
          f"side; load average {loads[0]} at the start, {loads[-1]} at the end; µs")
    names = list(results)
    print(f"{'':52}" + "".join(f"{n + ' p50':>14}{'mean':>8}" for n in names))
    for key, label in STEPS.items():
        cells = "".join(
            f"{results[n][key]['p50_us']:>14.0f}{results[n][key]['mean_us']:>8.0f}"
            if key in results[n] else f"{'-':>14}{'-':>8}"
            for n in names
        )
        print(f"{key:>7} {label:44}{cells}")
    output = args.output or RESULTS_DIR / f"txn-timeline-{time.strftime('%Y%m%dT%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({
        "mode": "quick" if args.quick else "full", "transactions": count,
        "rounds": args.rounds, "load": loads, "steps": results,
        "against": str(args.against) if args.against else None, "no_fsync": args.no_fsync,
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
