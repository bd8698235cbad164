"""Batch reads through the chronik source, checked against what was produced."""

from __future__ import annotations

import json

import pytest
from tests.spark.conftest import produce

pytestmark = pytest.mark.spark


def _reader(spark, bootstrap: str, **options: str):
    r = spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_produced_set(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=3)
    records = [
        (f"k{i % 7}".encode(), f"value-{i}".encode(), [("h", str(i).encode())] if i % 3 else None)
        for i in range(500)
    ]
    produce(bootstrap, topic, records)
    rows = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true").collect()
    assert len(rows) == 500
    got = sorted(
        (r.key, r.value, tuple((h.key, h.value) for h in r.headers) if r.headers else None)
        for r in rows
    )
    want = sorted((k, v, tuple(h) if h else None) for k, v, h in records)
    assert got == want
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    by_part: dict[int, list[int]] = {}
    for r in rows:
        by_part.setdefault(r.partition, []).append(r.offset)
    for offsets in by_part.values():
        assert sorted(offsets) == list(range(len(offsets)))


def test_schema_matches_kafka_source(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    df = _reader(spark, bootstrap, subscribe=topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
    ]
    assert df.count() == 0


def test_starting_and_ending_offsets_json(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    for p in (0, 1):
        produce(bootstrap, topic, [(None, f"{p}-{i}".encode(), None) for i in range(20)], p)
    df = _reader(
        spark, bootstrap, subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 8, "1": -1}}),
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 8)] + [(1, o) for o in range(20)]


def test_assign_and_subscribe_pattern(spark, bootstrap, topic_factory):
    a, b = topic_factory(partitions=2), topic_factory(partitions=2)
    produce(bootstrap, a, [(None, b"a", None)] * 4, 1)
    produce(bootstrap, b, [(None, b"b", None)] * 3, 0)
    df = _reader(spark, bootstrap, assign=json.dumps({a: [1]}))
    assert df.count() == 4
    df = _reader(spark, bootstrap, subscribePattern=f"({a}|{b})")
    assert sorted(r.value for r in df.collect()) == [b"a"] * 4 + [b"b"] * 3


def test_timestamps_select_offsets(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, [(None, b"old", None)] * 3, 0, timestamp=1_000_000)
    produce(bootstrap, topic, [(None, b"mid", None)] * 4, 0, timestamp=2_000_000)
    produce(bootstrap, topic, [(None, b"new", None)] * 5, 0, timestamp=3_000_000)
    df = _reader(spark, bootstrap, subscribe=topic, startingTimestamp="2000000",
                 endingTimestamp="3000000")
    assert sorted(r.value for r in df.collect()) == [b"mid"] * 4
    df = _reader(spark, bootstrap, subscribe=topic,
                 startingOffsetsByTimestamp=json.dumps({topic: {"0": 2_500_000}}))
    rows = df.collect()
    assert [r.value for r in rows] == [b"new"] * 5
    assert rows[0].timestamp.timestamp() == pytest.approx(3000.0)
    # A timestamp after every record matches nothing: an error by default, the end with "latest".
    late = {"startingTimestamp": "9000000"}
    with pytest.raises(Exception, match="no offset matches"):
        _reader(spark, bootstrap, subscribe=topic, **late).collect()
    df = _reader(spark, bootstrap, subscribe=topic,
                 startingOffsetsByTimestampStrategy="latest", **late)
    assert df.count() == 0


def test_min_partitions_splits_ranges(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, [(None, str(i).encode(), None) for i in range(100)], 0)
    df = _reader(spark, bootstrap, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.collect()) == list(range(100))


def test_invalid_options_fail_clearly(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    with pytest.raises(Exception, match="exactly one of"):
        _reader(spark, bootstrap).collect()
    with pytest.raises(Exception, match="not allowed for batch"):
        _reader(spark, bootstrap, subscribe=topic, startingOffsets="latest").collect()


def test_fail_on_data_loss(spark, bootstrap, topic_factory):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, [(None, str(i).encode(), None) for i in range(20)], 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        f.result(30)
    start = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="no longer available"):
        _reader(spark, bootstrap, subscribe=topic, startingOffsets=start).collect()
    df = _reader(spark, bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r.offset for r in df.collect()) == list(range(10, 20))
