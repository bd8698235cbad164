"""Batch-read throughput of the chronik Spark source beside Parquet, in one run.

    python bench/spark_read.py                   # 5M records of 100 bytes, a few minutes
    python bench/spark_read.py --records 500000  # smoke run

Starts `chronik serve` on a free port (or uses --bootstrap-server), produces the records with
confluent-kafka, then on local[2] times count() and groupBy(key).count() through the source,
writes the same rows to Parquet and times the same two queries on it, and on a Python source
that yields ready-made Arrow batches (the ceiling of Spark's Python data source path, no Kafka
involved). Also times the reader
alone, outside Spark, on one core, split into librdkafka consume and Arrow conversion, to show
where the per-record cost is. Figures go to stdout and bench/results/spark_read.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "spark"))
sys.path.insert(0, str(REPO / "src"))

from read_profile import profile_reader  # noqa: E402
from record_load import create_topic, produce_records  # noqa: E402

TARGET_ROWS_PER_S = 1_000_000


def spark_session(local_dir: str):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(HERE / "spark"), os.environ.get("PYTHONPATH")) if p
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv's packages
    from pyspark.sql import SparkSession

    from chronik.spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName("chronik-spark-read-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "3g")
        .config("spark.local.dir", local_dir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--bootstrap-server", help="an existing broker instead of chronik serve")
    parser.add_argument("--repeat", type=int, default=2, help="runs per query; best is kept")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="chronik-spark-bench-"))
    broker = None
    try:
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            from brokers import Chronik

            broker = Chronik()
            broker.start()
            bootstrap = broker.bootstrap
        topic = f"spark-read-{int(time.time())}"
        create_topic(bootstrap, topic, args.partitions)
        produce_s, _ = timed(lambda: produce_records(
            bootstrap, topic, args.records, args.record_size, args.keys))
        print(f"produced {args.records:,} x {args.record_size} B in {produce_s:.1f}s "
              f"({args.records / produce_s:,.0f} rec/s)", flush=True)

        profile = profile_reader(bootstrap, topic, partition=0)
        print(f"reader alone, one core, partition 0 ({profile['records']:,} records): "
              f"librdkafka consume() {profile['consume_ns_per_record']:.0f} ns/record, "
              f"Arrow columns {profile['arrow_ns_per_record']:.0f} ns/record; read_range "
              f"{profile['read_range_rows_per_s']:,.0f} rows/s; Fetch reader "
              f"{profile['fetch_reader_rows_per_s']:,.0f} rows/s", flush=True)

        spark = spark_session(str(work / "spark-local"))
        src = (spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).load())
        via_librdkafka = (spark.read.format("chronik").option("reader", "librdkafka")
                          .option("kafka.bootstrap.servers", bootstrap)
                          .option("subscribe", topic).load())
        parquet = str(work / "parquet")
        write_s, _ = timed(lambda: src.write.parquet(parquet))
        pq = spark.read.parquet(parquet)

        from ceiling import ArrowCeilingSource

        spark.dataSource.register(ArrowCeilingSource)
        ceiling = (spark.read.format("arrow_ceiling").option("records", str(args.records))
                   .option("partitions", str(args.partitions))
                   .option("recordSize", str(args.record_size)).option("keys", str(args.keys))
                   .load())

        results: dict[str, dict[str, float]] = {}
        for name, df in (("chronik source", src), ("via librdkafka", via_librdkafka),
                         ("parquet", pq), ("arrow ceiling", ceiling)):
            for query, run in (
                ("count()", lambda d=df: d.count()),
                ("groupBy(key).count()", lambda d=df: d.groupBy("key").count().collect()),
            ):
                best = float("inf")
                for _ in range(args.repeat):
                    seconds, value = timed(run)
                    best = min(best, seconds)
                if query == "count()":
                    assert value == args.records, f"{name} counted {value}"
                else:
                    assert sum(r["count"] for r in value) == args.records
                results.setdefault(query, {})[name] = args.records / best
                print(f"{name:>15} {query:<22} {best:6.2f}s {args.records / best:>12,.0f} rows/s",
                      flush=True)
        spark.stop()

        print()
        print("| query | chronik source rows/s | Parquet rows/s | source/Parquet "
              "| source with reader=librdkafka rows/s | Python-source ceiling rows/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for query, row in results.items():
            ratio = row["chronik source"] / row["parquet"]
            print(f"| {query} | {row['chronik source']:,.0f} | {row['parquet']:,.0f} "
                  f"| {ratio:.2f} | {row['via librdkafka']:,.0f} "
                  f"| {row['arrow ceiling']:,.0f} |")
        print(f"\nsource -> Parquet write: {args.records / write_s:,.0f} rows/s; target "
              f"{TARGET_ROWS_PER_S:,} rows/s through the source")
        out = REPO / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "spark_read.json").write_text(json.dumps({
            "records": args.records, "record_size": args.record_size,
            "partitions": args.partitions, "machine": platform.platform(),
            "cpus": os.cpu_count(), "rows_per_s": results,
            "parquet_write_rows_per_s": args.records / write_s,
            "produce_rows_per_s": args.records / produce_s, "reader_profile": profile,
        }, indent=2))
        return 0
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
