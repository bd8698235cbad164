"""The cost of broker-side schema validation: the same Avro-framed records produced to a
topic without it and to one with confluent.value.schema.validation=true, on one chronik
broker (serving the schema registry), in one run, alternating, and reported as a ratio.

    python bench/schema_validation_bench.py                  # 1M records x 5 rounds, ~1 minute
    python bench/schema_validation_bench.py --quick          # smoke run, a few seconds

Records: ~100-byte values, each Confluent's header (magic byte, the id of a schema
registered under the validated topic's subject) and a fastavro-encoded record; 1,024
distinct values, cycled. The producer is confluent-kafka with the broker bench's
settings (chronik's bench/workloads.producer_config: linger.ms=5, batch.size=1000000,
no compression, acks=1), so batches are as librdkafka makes them. Each row keeps its
best round (highest records/s; lowest broker CPU per record, from /proc's schedstat of
every broker thread). Prints records/s and the
broker's CPU per record for each topic and the validated/plain ratios, and writes the
figures as JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import platform
import sys
import time
import urllib.request
from pathlib import Path

import fastavro
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Chronik, free_port  # noqa: E402
from workloads import create_topic, producer_config  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "at", "type": "long"},
        {"name": "value", "type": "double"},
    ],
}
DISTINCT_VALUES = 1024
CHUNK = 2_000


def heads_kind(src: Path) -> str:
    """Whether the broker runs chronik.records.heads compiled or interpreted (a compiled
    module older than its source runs interpreted: chronik.records.compiled)."""
    folder = src / "chronik" / "records"
    built = list(folder.glob("heads.*.so"))
    digest = folder / "heads.py.sha256"
    if not built or not digest.exists():
        return "interpreted"
    current = hashlib.sha256((folder / "heads.py").read_bytes()).hexdigest()
    return "compiled" if digest.read_text().strip() == current else "interpreted (stale build)"


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of a process so far, in nanoseconds (/proc's schedstat: the
    10 ms ticks of /proc/<pid>/stat are too coarse for a few hundred milliseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


class ChronikWithRegistry(Chronik):
    def __init__(self, src: Path) -> None:
        super().__init__(src=src)
        self.registry_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--schema-registry-listen", f"127.0.0.1:{self.registry_port}"]


def register(url: str, subject: str) -> int:
    body = json.dumps({"schema": json.dumps(SCHEMA)}).encode()
    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["id"])


def framed_values(schema_id: int, size: int) -> list[bytes]:
    """Avro-framed values of about ``size`` bytes each."""
    parsed = fastavro.parse_schema(SCHEMA)
    header = b"\x00" + schema_id.to_bytes(4, "big")
    values = []
    for i in range(DISTINCT_VALUES):
        out = io.BytesIO()
        reading = {"sensor": f"sensor-{i:05d}-".ljust(size - 25, "x"), "at": i, "value": i / 7}
        fastavro.schemaless_writer(out, parsed, reading)
        values.append(header + out.getvalue())
    return values


def produce(bootstrap: str, topic: str, values: list[bytes], records: int) -> int:
    """Queue ``records`` records flat out and flush; the number that failed."""
    failed = 0

    def on_failure(err: object, msg: object) -> None:
        nonlocal failed
        failed += 1

    producer = Producer(
        producer_config(
            bootstrap, "1", **{"delivery.report.only.error": True, "on_delivery": on_failure}
        )
    )
    send = producer.produce
    poll = producer.poll
    n = len(values)
    queued = 0
    while queued < records:
        try:
            for _ in range(min(CHUNK, records - queued)):
                send(topic, values[queued % n])
                queued += 1
        except BufferError:
            poll(0.005)
        poll(0)
    if producer.flush(120) != 0:
        raise TimeoutError("records still undelivered 120 s after the run")
    return failed


def measure(broker: ChronikWithRegistry, topic: str, values: list[bytes], records: int) -> dict:
    assert broker.proc is not None
    cpu0 = cpu_ns(broker.proc.pid)
    start = time.perf_counter()
    failed = produce(broker.bootstrap, topic, values, records)
    elapsed = time.perf_counter() - start
    cpu = (cpu_ns(broker.proc.pid) - cpu0) / 1e9
    if failed:
        raise RuntimeError(f"{failed} records to {topic} failed")
    return {
        "records_per_s": records / elapsed,
        "cpu_us_per_record": cpu / records * 1e6,
        "broker_cores": cpu / elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per topic")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 records, one round")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "src",
        help="the chronik source tree to run (another checkout's, or one without the"
        " compiled modules to measure them interpreted)",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 50_000, 1

    broker = ChronikWithRegistry(args.src)
    broker.start()
    try:
        plain, validated = "bench-plain", "bench-validated"
        create_topic(broker.bootstrap, plain, 1)
        create_topic(
            broker.bootstrap, validated, 1, config={"confluent.value.schema.validation": "true"}
        )
        schema_id = register(f"http://127.0.0.1:{broker.registry_port}", f"{validated}-value")
        values = framed_values(schema_id, args.record_size)
        warmup = max(args.records // 10, 10_000)
        for topic in (plain, validated):
            measure(broker, topic, values, warmup)
        runs: dict[str, list[dict]] = {plain: [], validated: []}
        for round_ in range(args.rounds):
            order = (plain, validated) if round_ % 2 == 0 else (validated, plain)
            for topic in order:
                runs[topic].append(measure(broker, topic, values, args.records))
    finally:
        broker.stop()

    best = {
        topic: {
            "records_per_s": max(r["records_per_s"] for r in rs),
            "cpu_us_per_record": min(r["cpu_us_per_record"] for r in rs),
        }
        for topic, rs in runs.items()
    }
    ratio_rate = best[validated]["records_per_s"] / best[plain]["records_per_s"]
    ratio_cpu = best[validated]["cpu_us_per_record"] / best[plain]["cpu_us_per_record"]
    size = len(values[0])
    print(
        f"{args.records:,} records of {size} bytes per round, {args.rounds} rounds, "
        "1 partition, acks=1, linger.ms=5, batch.size=1000000; "
        f"chronik.records.heads {heads_kind(args.src)}"
    )
    print(f"{'topic':<28}{'records/s':>14}{'broker CPU µs/record':>24}")
    for label, topic in (("plain", plain), ("validated (value)", validated)):
        row = best[topic]
        print(f"{label:<28}{row['records_per_s']:>14,.0f}{row['cpu_us_per_record']:>24.3f}")
    print(f"{'validated/plain':<28}{ratio_rate:>14.3f}{ratio_cpu:>24.3f}")

    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    output = args.output or RESULTS_DIR / f"schema-validation-bench-{stamp}.json"
    output.write_text(
        json.dumps(
            {
                "mode": "quick" if args.quick else "full",
                "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                | {"output": str(output), "value_bytes": size, "heads": heads_kind(args.src)},
                "machine": platform.platform(),
                "runs": runs,
                "best": best,
                "ratio_records_per_s": ratio_rate,
                "ratio_cpu_per_record": ratio_cpu,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
