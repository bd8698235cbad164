"""Write throughput of the chronik Spark sink beside its old path, Spark's own Kafka sink and a
sink that drops the rows, in one run.

    python bench/spark_write.py                  # 3M rows of 100 bytes, 3 rounds, a few minutes
    python bench/spark_write.py --quick          # smoke run: 200k rows, one round
    python bench/spark_write.py --kafka-jars 'jars/*.jar'   # with Spark's Kafka sink

Starts `chronik serve` on a free port, caches a DataFrame of `--rows` rows (10,000 string keys,
100-byte values) on local[2], then times `df.write` into a new topic per write, the sinks in
turn within each round (alternating, so load on the machine spreads over all of them):

- `chronik`: the sink as it writes by default (record batches built from the Arrow columns);
- `chronik-librdkafka`: the same sink with `writer=librdkafka`, one confluent-kafka
  `produce()` per row (the only path before the record batches, kept unchanged);
- `spark-kafka`: Spark's own JVM Kafka sink (`format("kafka")`), when its jars are given
  (`--kafka-jars`, or $CHRONIK_SPARK_KAFKA_JARS: spark-sql-kafka-0-10, spark-token-provider-kafka,
  kafka-clients, commons-pool2 matching pyspark); pyspark does not ship them;
- `null`: a Python data source that drops its Arrow batches (bench/spark/null_sink.py), the
  ceiling of any Python sink on this machine.

The chronik sinks also write exactly-once (`sinkId`/`batchId`) and transactionally. Each
figure is the median of the rounds; ratios are taken from the same run. Figures go to
stdout and bench/results/spark_write.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "spark"))
sys.path.insert(0, str(REPO / "src"))

TARGET_ROWS_PER_S = 1_000_000


def _cpu_seconds() -> dict[tuple[str, int], float]:
    """CPU time (user + system) of this process's descendants, by (group, pid): the Spark
    JVM, its Python workers, the broker. On a machine shared with other work the wall clock
    says how much CPU this run got; CPU per row says what each sink costs."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    commands: dict[int, str] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            pid = int(stat.split("/")[2])
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        parent[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()
    out = {}
    for pid, seconds in times.items():
        up = pid
        while up not in (me, 0, 1) and up in parent:
            up = parent[up]
        if up != me or pid == me:
            continue
        cmd = commands[pid]
        group = ("jvm" if "java" in cmd.split(" ", 1)[0] else "python workers"
                 if "pyspark" in cmd else "broker" if "chronik" in cmd else "other")
        out[(group, pid)] = seconds
    return out


def _used(before: dict, after: dict) -> dict[str, float]:
    used: dict[str, float] = {}
    for key, seconds in after.items():
        used[key[0]] = used.get(key[0], 0.0) + seconds - before.get(key, 0.0)
    return used


def _jars(pattern: str | None) -> list[str]:
    if not pattern:
        return []
    return sorted(p for part in pattern.split(",") for p in glob.glob(part.strip()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200k rows, one round")
    parser.add_argument("--kafka-jars", default=os.environ.get("CHRONIK_SPARK_KAFKA_JARS"),
                        help="comma-separated globs of Spark's Kafka sink jars")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 200_000, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(HERE / "spark"), os.environ.get("PYTHONPATH")) if p
    )
    from brokers import Chronik
    from null_sink import NullSink
    from pyspark.sql import SparkSession

    from chronik.spark import register

    jars = _jars(args.kafka_jars)
    broker = Chronik()
    broker.start()
    try:
        builder = (
            SparkSession.builder.master("local[2]").appName("chronik-spark-write-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.local.dir", tempfile.mkdtemp(prefix="chronik-spark-write-"))
        )
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(NullSink)
        df = (spark.range(args.rows)
              .selectExpr("cast(id % 10000 as string) as key", "repeat('x', 100) as value")
              .repartition(2).cache())
        df.count()

        def writer(sink: str, mode: str, topic: str, df=df):
            if sink == "null":
                return df.write.format("null_sink").mode("append")
            if sink == "spark-kafka":
                return (df.write.format("kafka")
                        .option("kafka.bootstrap.servers", broker.bootstrap)
                        .option("topic", topic))
            w = (df.write.format("chronik").mode("append")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic))
            if sink == "chronik-librdkafka":
                w = w.option("writer", "librdkafka")
            if mode == "exactly-once":
                w = w.option("sinkId", f"bench-{uuid.uuid4().hex[:6]}").option("batchId", "0")
            elif mode == "transactional":
                w = w.option("transactional", "true")
            return w

        runs = [("chronik", "plain"), ("chronik-librdkafka", "plain"), ("null", "plain")]
        if jars:
            runs.append(("spark-kafka", "plain"))
        for mode in ("exactly-once", "transactional"):
            runs += [("chronik", mode), ("chronik-librdkafka", mode)]
        # Warm-up: Spark starts its Python workers, numba loads its compiled loops.
        small = df.limit(20_000).repartition(2)
        for sink, mode in runs:
            writer(sink, mode, f"warm-up-{uuid.uuid4().hex[:6]}", small).save()

        load = [os.getloadavg()[0]]
        seconds: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        cpu: dict[tuple[str, str], list[dict[str, float]]] = {run: [] for run in runs}
        for round_no in range(args.rounds):
            order = runs if round_no % 2 == 0 else list(reversed(runs))
            for sink, mode in order:
                w = writer(sink, mode, f"write-{sink}-{mode}-{uuid.uuid4().hex[:6]}")
                before = _cpu_seconds()
                start = time.perf_counter()
                w.save()
                took = time.perf_counter() - start
                used = _used(before, _cpu_seconds())
                seconds[(sink, mode)].append(took)
                cpu[(sink, mode)].append(used)
                print(f"round {round_no + 1} {sink:>19} {mode:>12}: {args.rows / took:>12,.0f} "
                      f"rows/s ({took:.2f}s; CPU s: "
                      + ", ".join(f"{g} {v:.2f}" for g, v in sorted(used.items())) + ")",
                      flush=True)
            load.append(os.getloadavg()[0])
        spark.stop()
    finally:
        broker.stop()

    rates = {f"{sink} {mode}": args.rows / statistics.median(s)
             for (sink, mode), s in seconds.items()}
    print(f"\nmedian of {args.rounds} round(s), {args.rows:,} rows of 100 bytes, local[2]; "
          f"load average {min(load):.1f}-{max(load):.1f}")
    # CPU seconds per million rows, median over the rounds, by process group.
    per_million = {
        f"{sink} {mode}": {g: statistics.median(u.get(g, 0.0) for u in used) * 1e6 / args.rows
                           for g in ("jvm", "python workers", "broker")}
        for (sink, mode), used in cpu.items()
    }
    for name, rate in rates.items():
        groups = per_million[name]
        print(f"{name:>32}: {rate:>12,.0f} rows/s; CPU s per 1M rows: {sum(groups.values()):.2f}"
              f" (jvm {groups['jvm']:.2f}, python workers {groups['python workers']:.2f}, "
              f"broker {groups['broker']:.2f})")
    ratios = {}
    for mode in ("plain", "exactly-once", "transactional"):
        new, old = rates.get(f"chronik {mode}"), rates.get(f"chronik-librdkafka {mode}")
        if new and old:
            ratios[f"chronik/librdkafka {mode}"] = new / old
    if "spark-kafka plain" in rates:
        ratios["chronik/spark-kafka plain"] = rates["chronik plain"] / rates["spark-kafka plain"]
    ratios["chronik/null plain"] = rates["chronik plain"] / rates["null plain"]
    for name, ratio in ratios.items():
        print(f"{name:>32}: x{ratio:.2f}")
    if not jars:
        print("spark-kafka: not run (no jars: --kafka-jars or $CHRONIK_SPARK_KAFKA_JARS)")
    met = rates["chronik plain"] >= TARGET_ROWS_PER_S
    print(f"target {TARGET_ROWS_PER_S:,} rows/s for a plain write: {'met' if met else 'not met'}")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "spark_write.json").write_text(json.dumps({
        "rows": args.rows, "rounds": args.rounds, "load": [min(load), max(load)],
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "seconds": {f"{s} {m}": v for (s, m), v in seconds.items()},
        "rows_per_s": rates, "ratios": ratios, "cpu_s_per_million_rows": per_million,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
