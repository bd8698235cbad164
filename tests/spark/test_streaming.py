"""Streaming reads: new records are picked up exactly once, across restarts from a checkpoint."""

from __future__ import annotations

import json
import time

import pytest
from tests.spark.conftest import produce

pytestmark = pytest.mark.spark


def _stream(spark, bootstrap: str, **options: str):
    r = spark.readStream.format("chronik").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _run_available_now(df, out: str, checkpoint: str):
    query = (
        df.writeStream.format("parquet").option("path", out)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    assert not query.isActive
    return query


def _sink_rows(spark, out: str) -> list[tuple[int, int, bytes]]:
    return [(r.partition, r.offset, r.value)
            for r in spark.read.parquet(out).select("partition", "offset", "value").collect()]


def _wait_for_rows(spark, out: str, count: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(_sink_rows(spark, out)) >= count:
                return
        except Exception:  # noqa: BLE001 - the sink has no files yet
            pass
        time.sleep(1)
    raise AssertionError(f"sink did not reach {count} rows in {timeout}s")


def test_stream_picks_up_appends_and_resumes_from_checkpoint(
    spark, bootstrap, topic_factory, tmp_path
):
    topic = topic_factory(partitions=2)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    produce(bootstrap, topic, [(b"k", f"a{i}".encode(), None) for i in range(40)])
    df = _stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    query = (
        df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
        .trigger(processingTime="1 second").start()
    )
    try:
        _wait_for_rows(spark, out, 40)
        produce(bootstrap, topic, [(b"k", f"b{i}".encode(), None) for i in range(25)])
        _wait_for_rows(spark, out, 65)
    finally:
        query.stop()
    produce(bootstrap, topic, [(b"k", f"c{i}".encode(), None) for i in range(30)])
    _run_available_now(_stream(spark, bootstrap, subscribe=topic), out, ckpt)
    rows = _sink_rows(spark, out)
    assert len(rows) == 95
    assert len({(p, o) for p, o, _ in rows}) == 95
    want = {f"{x}{i}".encode() for x, n in (("a", 40), ("b", 25), ("c", 30)) for i in range(n)}
    assert {v for _, _, v in rows} == want


def test_starting_offsets_latest_skips_existing(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(partitions=1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    produce(bootstrap, topic, [(None, b"before", None)] * 10)
    _run_available_now(_stream(spark, bootstrap, subscribe=topic), out, ckpt)
    produce(bootstrap, topic, [(None, b"after", None)] * 5)
    _run_available_now(_stream(spark, bootstrap, subscribe=topic), out, ckpt)
    assert sorted(v for _, _, v in _sink_rows(spark, out)) == [b"after"] * 5


def test_max_offsets_per_trigger_with_available_now(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(partitions=3)
    for p in range(3):
        produce(bootstrap, topic, [(None, f"{p}-{i}".encode(), None) for i in range(30)], p)
    df = _stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="20")
    query = _run_available_now(df, str(tmp_path / "out"), str(tmp_path / "ckpt"))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 90
    assert max(sizes) <= 20
    assert len(sizes) >= 5
    assert len(_sink_rows(spark, str(tmp_path / "out"))) == 90


def test_checkpoint_offsets_are_kafka_source_json(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, [(None, b"x", None)] * 7, 1)
    ckpt = tmp_path / "ckpt"
    _run_available_now(_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest"),
                       str(tmp_path / "out"), str(ckpt))
    last = max((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()),
               key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {topic: {"0": 0, "1": 7}}


def test_partitions_added_later_are_read_from_their_start(
    spark, bootstrap, topic_factory, tmp_path
):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = topic_factory(partitions=1)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    produce(bootstrap, topic, [(None, b"p0-first", None)] * 3, 0)
    stream = _stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    _run_available_now(stream, out, ckpt)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_partitions([NewPartitions(topic, 2)]).values():
        f.result(30)
    produce(bootstrap, topic, [(None, b"p1", None)] * 4, 1)
    produce(bootstrap, topic, [(None, b"p0-second", None)] * 2, 0)
    _run_available_now(_stream(spark, bootstrap, subscribe=topic), out, ckpt)
    rows = _sink_rows(spark, out)
    assert sorted((p, o) for p, o, _ in rows) == [(0, o) for o in range(5)] + [
        (1, o) for o in range(4)]
