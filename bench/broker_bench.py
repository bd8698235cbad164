"""Produce/consume throughput and produce latency: chronik (on disk) side by side with Tansu
(in memory), in one run, with the same confluent-kafka workloads.

    python bench/broker_bench.py            # full run, a few minutes
    python bench/broker_bench.py --quick    # smoke run, a few seconds per broker

Prints a table with both brokers and the chronik/tansu ratio per row and writes
the figures as JSON to bench/results/. With ``--baseline DIR`` a second chronik, from
another checkout's src/, runs beside them, with a chronik/baseline column: a change
measured before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import BROKERS, BrokerProcess, Chronik, CpuMeter, Tansu  # noqa: E402
from latency_probe import LatencyProbe  # noqa: E402
from results_table import render_table  # noqa: E402
from workloads import (  # noqa: E402
    consume_throughput,
    create_topic,
    delete_topics,
    produce_latency,
    produce_throughput,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGET_RECORDS_PER_S = 500_000


@dataclass(frozen=True)
class Settings:
    record_size: int = 100
    produce_seconds: float = 8.0
    produce_max_records: int = 4_000_000
    produce_warmup: int = 100_000
    latency_rate: int = 2_000
    latency_seconds: float = 10.0
    latency_warmup: int = 500
    probe_rate: int = 500  # records/s of the latency probe beside each produce load


QUICK = Settings(
    produce_seconds=1.0,
    produce_max_records=300_000,
    produce_warmup=10_000,
    latency_rate=500,
    latency_seconds=1.0,
    latency_warmup=50,
    probe_rate=200,
)

# (partitions, acks, batching overrides, row suffix). The first four are the
# issue's grid with large batches; the last two use the Java producer's 3.x
# defaults (16 KB batches, no linger), which cost a broker many more requests.
SMALL_BATCHES = {"batch.size": 16_384, "linger.ms": 0}
PRODUCE_CASES: list[tuple[int, str, dict[str, object], str]] = [
    (1, "1", {}, ""),
    (1, "all", {}, ""),
    (6, "1", {}, ""),
    (6, "all", {}, ""),
    (1, "1", SMALL_BATCHES, "-16k"),
    (6, "all", SMALL_BATCHES, "-16k"),
]
CONSUME_PARTITIONS = [1, 6]
LATENCY_ACKS = ["1", "all"]

Step = Callable[[str, CpuMeter], dict[str, object]]


def produce_row(partitions: int, acks: str, suffix: str = "") -> str:
    return f"produce-{partitions}p-acks-{acks}{suffix}"


def topic_for(row_id: str, run: int) -> str:
    return f"bench-{row_id}-run{run}"


def plan(settings: Settings, run: int) -> tuple[list[tuple[str, Step]], list[str]]:
    """(row id, workload taking a bootstrap address and a CPU meter) in the order they
    run, and the topics they create; each repetition `run` has topics of its own."""
    size = settings.record_size
    topics: list[str] = []

    def topic_name(row_id: str) -> str:
        topics.append(topic_for(row_id, run))
        return topics[-1]

    steps: list[tuple[str, Step]] = []
    produced: dict[str, dict[int, int]] = {}

    for partitions, acks, batching, suffix in PRODUCE_CASES:
        row_id = produce_row(partitions, acks, suffix)

        def produce(
            bootstrap: str,
            meter: CpuMeter,
            partitions: int = partitions,
            acks: str = acks,
            batching: dict[str, object] = batching,
            suffix: str = suffix,
            topic: str = topic_name(row_id),
        ) -> dict:
            create_topic(bootstrap, topic, partitions)
            with LatencyProbe(
                bootstrap,
                topic,
                acks=acks,
                record_size=size,
                rate=settings.probe_rate,
                seconds=settings.produce_seconds,
            ) as probe:
                result = produce_throughput(
                    bootstrap,
                    topic,
                    acks=acks,
                    record_size=size,
                    seconds=settings.produce_seconds,
                    max_records=settings.produce_max_records,
                    warmup_records=settings.produce_warmup,
                    batching=batching,
                    meter=meter,
                    probe=probe,
                )
                under_load = probe.result()
            if acks == "1" and not suffix:
                produced.setdefault(bootstrap, {})[partitions] = (
                    result.records
                    + result.warmup_records
                    + under_load.samples
                    + under_load.warmup_delivered
                )
            return {
                **result.as_dict(size),
                "load_latency_samples": under_load.samples,
                "load_latency_warmup": under_load.warmup_delivered,
                "load_latency_failed": under_load.failed,
                "load_p50_ms": under_load.p50_ms,
                "load_p99_ms": under_load.p99_ms,
            }

        steps.append((row_id, produce))

    for partitions in CONSUME_PARTITIONS:

        def consume(bootstrap: str, meter: CpuMeter, partitions: int = partitions) -> dict:
            expected = produced.get(bootstrap, {}).get(partitions)
            if not expected:
                raise RuntimeError("nothing was produced to read back")
            topic = topic_for(produce_row(partitions, "1"), run)
            result = consume_throughput(bootstrap, topic, partitions, expected, meter=meter)
            return result.as_dict(size)

        steps.append((f"consume-{partitions}p", consume))

    for acks in LATENCY_ACKS:
        row_id = f"latency-1p-acks-{acks}"

        def latency(
            bootstrap: str,
            meter: CpuMeter,
            acks: str = acks,
            topic: str = topic_name(row_id),
        ) -> dict:
            create_topic(bootstrap, topic, 1)
            return produce_latency(
                bootstrap,
                topic,
                acks=acks,
                record_size=size,
                rate=settings.latency_rate,
                seconds=settings.latency_seconds,
                warmup_records=settings.latency_warmup,
                meter=meter,
            ).as_dict(size)

        steps.append((row_id, latency))
    return steps, topics


def best(rows: list[dict[str, object]]) -> dict[str, object]:
    """The repetition least disturbed by other load: highest throughput, or lowest p99."""
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return rows[-1]
    if "p99_ms" in ok[0]:
        chosen = min(ok, key=lambda r: r["p99_ms"])
        key = "p99_ms"
    else:
        chosen = max(ok, key=lambda r: r["records_per_s"])
        key = "records_per_s"
    return {**chosen, "repetitions": [r.get(key) for r in rows]}


def run_step(broker: BrokerProcess, step: Step) -> dict[str, object]:
    meter = CpuMeter(broker)
    try:
        row = step(broker.bootstrap, meter)
    except Exception as exc:  # a failing broker must not hide the other's figures
        row = {"error": f"{type(exc).__name__}: {exc}"}
        if broker.proc is not None and broker.proc.poll() is not None:
            row["error"] += f" (broker exited {broker.proc.returncode})\n{broker.log_tail()}"
        return row
    # Broker CPU over the measured window only (not warm-up or topic creation).
    row["broker_cpu_s"] = meter.cpu_s
    row["broker_cores"] = meter.cpu_s / meter.wall_s if meter.wall_s else 0.0
    records = row.get("records") or row.get("samples")
    if records:
        row["broker_cpu_us_per_record"] = meter.cpu_s / records * 1e6
    row["broker_rss_mb"] = broker.rss_mb()
    return row


def headline(row: dict[str, object]) -> str:
    if "error" in row:
        return str(row["error"]).splitlines()[0]
    if "p99_ms" in row:
        return f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms"
    return f"{row['records_per_s']:,.0f} records/s"


def _first(version: object) -> str:
    return str(version[0] if isinstance(version, tuple) else version)


def chronik_revision(repo: Path | None = None) -> str:
    """The checkout's commit (this one's by default), marked dirty when src/ has
    uncommitted changes."""
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"git {rev}{' (src/ modified)' if dirty else ''}"


def machine() -> dict[str, object]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "confluent_kafka": _first(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def target_line(results: dict[str, dict[str, dict]]) -> str:
    chronik = results.get("chronik", {})
    parts = []
    for acks in ("1", "all"):
        rate = chronik.get(f"produce-1p-acks-{acks}", {}).get("records_per_s")
        if rate:
            verdict = "met" if rate >= TARGET_RECORDS_PER_S else "not met"
            share = rate / TARGET_RECORDS_PER_S
            parts.append(f"acks={acks}: {rate:,.0f} records/s ({share:.0%} of target, {verdict})")
    if not parts:
        return "target 500,000 records/s at 1 partition: no chronik figure"
    return "target 500,000 records/s at 1 partition, chronik " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per broker")
    parser.add_argument(
        "--brokers", default="chronik,tansu", help="comma-separated subset of chronik,tansu"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another chronik checkout (its src/ is used) run beside this one as 'baseline',"
        " with a chronik/baseline column: a change measured before and after in one run",
    )
    parser.add_argument("--output", type=Path, help="JSON file (default: bench/results/...)")
    parser.add_argument("--produce-seconds", type=float, help="override produce run length")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run everything N times, report each row's best"
    )
    parser.add_argument(
        "--only", help="run only the rows whose id contains this (e.g. latency-1p-acks-all)"
    )
    args = parser.parse_args(argv)

    settings = QUICK if args.quick else Settings()
    if args.produce_seconds:
        settings = Settings(**{**settings.__dict__, "produce_seconds": args.produce_seconds})
    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    unknown = [n for n in names if n not in BROKERS]
    if unknown:
        parser.error(f"unknown broker(s): {', '.join(unknown)}")
    if args.baseline is not None:
        if not (args.baseline / "src" / "chronik").is_dir():
            parser.error(f"--baseline {args.baseline}: no src/chronik there")
        names.insert(names.index("chronik") + 1 if "chronik" in names else 0, "baseline")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    brokers: dict[str, BrokerProcess] = {}
    storage: dict[str, str] = {}
    runs: dict[str, dict[str, list[dict]]] = {name: {} for name in names}
    startup_errors: dict[str, str] = {}
    started = time.time()
    load_at_start = os.getloadavg()
    try:
        for name in names:
            if name == "baseline":
                broker = Chronik(name="baseline", src=args.baseline.resolve() / "src")
            else:
                broker = BROKERS[name]()
            storage[name] = broker.storage
            try:
                broker.start()
                brokers[name] = broker
                print(f"{name} listening on {broker.bootstrap} ({broker.storage})", flush=True)
            except Exception as exc:
                startup_errors[name] = str(exc)
                print(f"{name} failed to start: {exc}", file=sys.stderr, flush=True)
                broker.stop()

        for run in range(args.repeat):
            steps, topics = plan(settings, run)
            if args.only:
                steps = [(row_id, step) for row_id, step in steps if args.only in row_id]
            for index, (row_id, step) in enumerate(steps):
                # Alternate which broker goes first so drifting machine load hits both alike.
                order = list(brokers.items())
                if (index + run) % 2:
                    order.reverse()
                for name, broker in order:
                    row = run_step(broker, step)
                    runs[name].setdefault(row_id, []).append(row)
                    print(f"  run {run} {row_id:<24} {name:<8} {headline(row)}", flush=True)
            for broker in brokers.values():
                delete_topics(broker.bootstrap, topics)  # Tansu holds them all in memory
    finally:
        versions = {
            name: (
                b.version()
                if isinstance(b, Tansu)
                else chronik_revision(args.baseline)
                if name == "baseline"
                else chronik_revision()
            )
            for name, b in brokers.items()
        }
        load_at_end = os.getloadavg()
        for broker in brokers.values():
            broker.stop()

    results = {
        name: {row: best(rows) for row, rows in by_row.items()} for name, by_row in runs.items()
    }
    report = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "mode": "quick" if args.quick else "full",
        "settings": settings.__dict__,
        "machine": {
            **machine(),
            "load_avg_at_start": load_at_start,
            "load_avg_at_end": load_at_end,
        },
        "brokers": {
            name: {
                "storage": storage.get(name),
                "version": versions.get(name, ""),
                "startup_error": startup_errors.get(name),
            }
            for name in names
        },
        "repeat": args.repeat,
        "results": results,
        "runs": runs,
        "target_records_per_s": TARGET_RECORDS_PER_S,
    }
    output = args.output or RESULTS_DIR / time.strftime(
        f"broker-bench-%Y%m%d-%H%M%S{'-quick' if args.quick else ''}.json", time.gmtime(started)
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")

    print()
    print(render_table(results, names, settings.latency_rate))
    print()
    print(target_line(results))
    print(f"JSON: {output}")
    failed = startup_errors or any(
        "error" in row for rows in results.values() for row in rows.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
