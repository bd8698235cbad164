"""Avro decoding through the chronik Spark source, beside reading the raw bytes, in one run.

    python bench/spark_avro_read.py                    # 1M records, a few minutes
    python bench/spark_avro_read.py --records 200000   # smoke run

Starts `chronik serve --schema-registry-listen` on free ports, registers a 6-field user
schema (v1) and its evolution (v2: one more field with a default), and fills two topics in
Confluent's wire format: one written with v2 (writer = reader schema), one with v1 (each
record resolved to v2 on read). On local[2] it times, best of --repeat, one aggregate that
needs the value on:

- the raw bytes through the source: sum(length(value));
- the decoded column (valueFormat=avro): sum(value.age), for both topics;
- Spark's own from_avro on the same payloads with the 5-byte header cut off, when the
  spark-avro jar is on the classpath (--avro-jar); pyspark does not ship it.

Also decodes one topic's values outside Spark, on one core, with the source's decoder: its
compiled path (records of primitive fields, what this schema takes) and its per-record path
(fastavro; what arrays, maps and unions of several types take). Figures go to stdout and
bench/results/spark_avro_read.json.
"""

from __future__ import annotations

import argparse
import io
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

from brokers import Chronik, free_port  # noqa: E402
from record_load import create_topic  # noqa: E402

FIELDS_V1 = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "age", "type": "int"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "score", "type": "double"},
    {"name": "joined", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]
USER_V1 = {"type": "record", "name": "User", "namespace": "bench", "fields": FIELDS_V1}
USER_V2 = {
    **USER_V1,
    "fields": [*FIELDS_V1, {"name": "country", "type": "string", "default": "unknown"}],
}


class ChronikWithRegistry(Chronik):
    def __init__(self) -> None:
        super().__init__()
        self.registry_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--schema-registry-listen", f"127.0.0.1:{self.registry_port}"]

    @property
    def registry_url(self) -> str:
        return f"http://127.0.0.1:{self.registry_port}"


def register(url: str, subject: str, schema: dict) -> int:
    import urllib.request

    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["id"])


def produce_avro(bootstrap: str, topic: str, schema: dict, schema_id: int, count: int) -> None:
    import fastavro
    from confluent_kafka import Producer

    parsed = fastavro.parse_schema(schema)
    head = b"\0" + schema_id.to_bytes(4, "big")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": "1",
        }
    )
    has_country = any(f["name"] == "country" for f in schema["fields"])
    for i in range(count):
        user = {
            "id": i,
            "name": f"user-{i}",
            "age": 18 + i % 60,
            "email": f"u{i}@example.com" if i % 3 else None,
            "score": i * 0.5,
            "joined": 1_700_000_000_000 + i,
        }
        if has_country:
            user["country"] = "NO"
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, user)
        while True:
            try:
                producer.produce(topic, head + out.getvalue())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")


def decode_alone(bootstrap: str, topic: str, url: str) -> dict[str, float]:
    """Rows/s of the source's decoder on one partition's values, one core, no Spark: the
    compiled path (what the source takes for this schema) and the per-record one (what it
    takes for arrays, maps, unions of several types, batches with several schema ids)."""
    import pyarrow as pa

    from chronik.spark.offsets import OffsetPlanner
    from chronik.spark.options import kafka_config, parse_read_options
    from chronik.spark.readers import OffsetRange, _read
    from chronik.spark.schema_options import parse_schema_options, plan_decoding
    from chronik.spark.value_decode import ColumnDecoder

    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "valueFormat": "avro",
        "schemaRegistryUrl": url,
    }
    plan = plan_decoding(parse_schema_options(options, kafka_config(options)), [topic])
    read = parse_read_options(options, streaming=False)
    end = OffsetPlanner(read.kafka, read.subscription).latest([(topic, 0)])[(topic, 0)]
    batches = list(_read(read, OffsetRange(topic, 0, 0, end)))
    rows = sum(b.num_rows for b in batches)
    decoder = ColumnDecoder(plan.columns[0], url, "fail")
    first = batches[0]
    decoder.decode(first.column("value"), topic, 0, first.column("offset"))  # warm: compile
    start = time.perf_counter()
    for b in batches:
        decoder.decode(b.column("value"), topic, 0, b.column("offset"))
    compiled = rows / (time.perf_counter() - start)
    reader = decoder._reader(topic)
    start = time.perf_counter()
    for b in batches:
        out = [None] * b.num_rows
        reader.decode_all(b.column("value"), out, lambda i, exc: None)
        pa.array(out, decoder.arrow_type)
    per_record = rows / (time.perf_counter() - start)
    return {"compiled": compiled, "per_record": per_record}


def spark_session(local_dir: str, avro_jar: str | None):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from chronik.spark import register as register_source

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("chronik-spark-avro-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "3g")
        .config("spark.local.dir", local_dir)
    )
    if avro_jar:
        builder = builder.config("spark.jars", avro_jar)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_source(spark)
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--avro-jar", help="spark-avro_2.13 jar matching pyspark, for from_avro")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark-avro-bench-"))
    broker = ChronikWithRegistry()
    try:
        broker.start()
        bootstrap, url = broker.bootstrap, broker.registry_url
        stamp = int(time.time())
        same, evolved = f"avro-same-{stamp}", f"avro-evolved-{stamp}"
        for topic in (same, evolved):
            create_topic(bootstrap, topic, args.partitions)
        v1 = register(url, f"{evolved}-value", USER_V1)
        register(url, f"{evolved}-value", USER_V2)
        v2 = register(url, f"{same}-value", USER_V2)
        start = time.perf_counter()
        produce_avro(bootstrap, same, USER_V2, v2, args.records)
        produce_avro(bootstrap, evolved, USER_V1, v1, args.records)
        print(
            f"produced 2 x {args.records:,} Avro records in {time.perf_counter() - start:.1f}s",
            flush=True,
        )

        alone = decode_alone(bootstrap, same, url)
        print(
            f"decoder alone, one core, partition 0: compiled {alone['compiled']:,.0f} rows/s, "
            f"per record {alone['per_record']:,.0f} rows/s",
            flush=True,
        )

        spark = spark_session(str(work / "spark-local"), args.avro_jar)
        from pyspark.sql import functions as F

        def source(topic: str, **options: str):
            reader = (
                spark.read.format("chronik")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
            )
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        runs = {
            "raw bytes: sum(length(value))": lambda: (
                source(same).agg(F.sum(F.length("value"))).collect()
            ),
            "valueFormat=avro: sum(value.age)": lambda: (
                source(same, valueFormat="avro").agg(F.sum("value.age")).collect()
            ),
            "valueFormat=avro, written v1 read v2: sum(value.age)": lambda: (
                source(evolved, valueFormat="avro").agg(F.sum("value.age")).collect()
            ),
        }
        from_avro_note = None
        try:
            from pyspark.sql.avro.functions import from_avro

            payload = F.expr("substring(value, 6, length(value) - 5)")
            schema_text = json.dumps(USER_V2)
            probe = source(same).limit(1).select(from_avro(payload, schema_text).alias("v"))
            probe.collect()
            runs["from_avro on the 5-byte-stripped bytes: sum(v.age)"] = lambda: (
                source(same)
                .select(from_avro(payload, schema_text).alias("v"))
                .agg(F.sum("v.age"))
                .collect()
            )
        except Exception as exc:  # noqa: BLE001 - reported, the other figures still stand
            from_avro_note = (
                f"from_avro not measured: spark-avro is not on the classpath "
                f"({type(exc).__name__}); pass --avro-jar"
            )
            print(from_avro_note, flush=True)

        results: dict[str, float] = {}
        for name, run in runs.items():
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            results[name] = args.records / best
            print(f"{name:<55} {best:6.2f}s {results[name]:>12,.0f} rows/s", flush=True)
        spark.stop()

        raw = results["raw bytes: sum(length(value))"]
        print("\n| query | rows/s | / raw bytes |")
        print("|---|---:|---:|")
        for name, rate in results.items():
            print(f"| {name} | {rate:,.0f} | {rate / raw:.2f} |")
        out = REPO / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "spark_avro_read.json").write_text(
            json.dumps(
                {
                    "records": args.records,
                    "partitions": args.partitions,
                    "machine": platform.platform(),
                    "cpus": os.cpu_count(),
                    "rows_per_s": results,
                    "decoder_alone_rows_per_s": alone,
                    "from_avro": from_avro_note or "measured",
                },
                indent=2,
            )
        )
        return 0
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
