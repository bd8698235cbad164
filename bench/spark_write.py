"""Write throughput of the chronik Spark sink: a plain batch write and an exactly-once one.

    python bench/spark_write.py                  # 1M rows of 100 bytes, under a minute
    python bench/spark_write.py --rows 200000    # smoke run

Starts `chronik serve` on a free port, caches a DataFrame of `--rows` rows (10,000 keys,
100-byte values) on local[2], then times `df.write.format("chronik")` into a new topic, once
plainly and once with `sinkId`/`batchId` (the exactly-once protocol, as foreachBatch
projections use it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE.parent / "src"), os.environ.get("PYTHONPATH")) if p
    )
    from brokers import Chronik
    from pyspark.sql import SparkSession

    from chronik.spark import register

    broker = Chronik()
    broker.start()
    try:
        spark = (
            SparkSession.builder.master("local[2]").appName("chronik-spark-write-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.local.dir", tempfile.mkdtemp(prefix="chronik-spark-write-"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        df = (spark.range(args.rows)
              .selectExpr("cast(id % 10000 as string) as key", "repeat('x', 100) as value")
              .repartition(2).cache())
        df.count()
        # Warm-up: Spark starts its Python workers on the first write.
        (df.limit(10_000).write.format("chronik").mode("append")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "warm-up").save())
        for mode in ("plain", "exactly-once"):
            writer = (df.write.format("chronik").mode("append")
                      .option("kafka.bootstrap.servers", broker.bootstrap)
                      .option("topic", f"write-{mode}-{uuid.uuid4().hex[:6]}"))
            if mode == "exactly-once":
                writer = writer.option("sinkId", f"bench-{uuid.uuid4().hex[:6]}")
                writer = writer.option("batchId", "0")
            start = time.perf_counter()
            writer.save()
            seconds = time.perf_counter() - start
            print(f"{mode:>12} write: {args.rows:,} rows in {seconds:.2f}s, "
                  f"{args.rows / seconds:,.0f} rows/s", flush=True)
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
