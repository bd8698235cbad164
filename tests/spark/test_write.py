"""Batch and streaming writes; the streaming sink writes a replayed micro-batch only once."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tests.spark.conftest import produce

from chronik.spark import writers
from chronik.spark.options import OptionError

pytestmark = pytest.mark.spark


def _read_all(spark, bootstrap: str, topic: str, headers: bool = False):
    return (
        spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("includeHeaders", str(headers).lower()).load()
    )


def test_batch_write_round_trips(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", [("h", b"1")] if i % 2 else None) for i in range(50)],
        "key string, value string, headers array<struct<key:string,value:binary>>",
    )
    df.write.format("chronik").mode("append").option(
        "kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    rows = _read_all(spark, bootstrap, topic, headers=True).collect()
    assert sorted((r.key, r.value) for r in rows) == sorted(
        (f"k{i}".encode(), f"v{i}".encode()) for i in range(50))
    assert sum(1 for r in rows if r.headers) == 25
    # Same key, same partition: the producer's partitioner is keyed as Kafka's.
    parts: dict[bytes, set[int]] = {}
    for r in rows:
        parts.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in parts.values())


def test_exactly_once_batch_write_creates_its_topic_like_a_plain_one(spark, bootstrap):
    import uuid

    topic = f"new-{uuid.uuid4().hex[:8]}"  # does not exist yet; the broker auto-creates
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
    for _ in range(2):  # the second write of the same batch id writes nothing
        (df.write.format("chronik").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("sinkId", f"s-{topic}").option("batchId", "0").save())
    assert _read_all(spark, bootstrap, topic).count() == 20


def test_write_needs_value_and_topic(spark, bootstrap):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic"):
        df.write.format("chronik").mode("append").option(
            "kafka.bootstrap.servers", bootstrap).save()


def _copy_stream(spark, bootstrap, src, dst, ckpt, **options):
    df = (
        spark.readStream.format("chronik").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30").load().select("key", "value")
    )
    query = (
        df.writeStream.format("chronik").option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst).option("checkpointLocation", ckpt).options(**options)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    return query


def test_stream_write_replayed_batch_writes_nothing_twice(
    spark, bootstrap, topic_factory, tmp_path
):
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    produce(bootstrap, src, [(f"k{i % 5}".encode(), f"v{i}".encode(), None) for i in range(100)])
    ckpt = tmp_path / "ckpt"
    _copy_stream(spark, bootstrap, src, dst, str(ckpt))
    assert _read_all(spark, bootstrap, dst).count() == 100
    # A crash after the sink wrote the last batch but before Spark recorded it as committed:
    # on restart Spark runs that batch again.
    commits = sorted((p for p in (ckpt / "commits").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    commits[-1].unlink()
    (ckpt / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    query = _copy_stream(spark, bootstrap, src, dst, str(ckpt))
    assert any(p["batchId"] == int(commits[-1].name) for p in query.recentProgress)
    rows = _read_all(spark, bootstrap, dst, headers=True).collect()
    assert len(rows) == 100
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(100))
    assert all(any(h.key == "chronik.sink" for h in r.headers) for r in rows)


def test_task_retry_after_partial_write_skips_written_rows(bootstrap, topic_factory):
    """A task attempt that died mid-write left rows behind: the next attempt adds only the rest."""
    dst = topic_factory(partitions=1)
    core = writers._RowProducer({"kafka.bootstrap.servers": bootstrap, "topic": dst})
    values = [f"v{i}".encode() for i in range(20)]
    first = pa.RecordBatch.from_pydict({"value": values[:12]})
    result = writers._exactly_once_write(core, iter([first]), "retry-test", 3, 0)
    assert result.rows == 12
    full = pa.RecordBatch.from_pydict({"value": values})
    result = writers._exactly_once_write(core, iter([full]), "retry-test", 3, 0)
    assert (result.rows, result.skipped) == (8, 12)
    writers._commit(core, "retry-test", 3)
    result = writers._exactly_once_write(core, iter([full]), "retry-test", 3, 0)
    assert (result.rows, result.skipped) == (0, 20)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    assert c.get_watermark_offsets(TopicPartition(dst, 0), timeout=10) == (0, 20)
    c.close()


def _read_committed(spark, bootstrap: str, topic: str):
    return (
        spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load()
    )


def test_transactional_batch_write_is_read_committed(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(40)], "key string, value string")
    (df.repartition(3).write.format("chronik").mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .option("transactional", "true").save())
    rows = _read_committed(spark, bootstrap, topic).collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(40))
    with pytest.raises(Exception, match="sinkId"):
        (df.write.format("chronik").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("transactional", "true").option("sinkId", "s")
         .option("batchId", "0").save())


def test_a_zombie_task_attempt_is_fenced_and_its_rows_never_committed(bootstrap, topic_factory):
    """Two attempts of one task share a transactional id: the second fences the first,
    whose open transaction is aborted, and only the second's rows are read committed."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    dst = topic_factory(partitions=1)
    core = writers._RowProducer(
        {"kafka.bootstrap.servers": bootstrap, "topic": dst, "transactional": "true"}
    )
    txn_id = writers.transactional_id(core.id_prefix, f"zombie-{dst}", 0)
    zombie = core.producer(txn_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    core.produce_all([pa.RecordBatch.from_pydict({"value": [b"zombie"] * 5})], producer=zombie)
    result = core.transactional_write(
        [pa.RecordBatch.from_pydict({"value": [f"v{i}".encode() for i in range(10)]})], txn_id
    )
    assert result.rows == 10
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{dst}",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(dst, 0, 0)])
    values = []
    for _ in range(100):
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            break  # end of partition
        values.append(msg.value())
    consumer.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(10))


def test_transactional_stream_write(spark, bootstrap, topic_factory, tmp_path):
    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    produce(bootstrap, src, [(f"k{i % 5}".encode(), f"v{i}".encode(), None) for i in range(90)])
    _copy_stream(spark, bootstrap, src, dst, str(tmp_path / "ckpt"), transactional="true")
    rows = _read_committed(spark, bootstrap, dst).collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(90))


def _consume_all(bootstrap: str, topic: str, partitions: int, committed: bool = False) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
        "enable.partition.eof": True,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, ended = [], set()
    for _ in range(2000):
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            ended.add(msg.partition())
            if len(ended) == partitions:
                break
            continue
        out.append(msg)
    consumer.close()
    return out


def _rows(n: int) -> pa.RecordBatch:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.RecordBatch.from_pydict({
        "key": pa.array([None if i % 7 == 0 else f"key-{i % 13}" for i in range(n)]),
        "value": pa.array([None if i % 11 == 0 else f"v{i}".encode() * (i % 5) for i in range(n)],
                          pa.binary()),
        "headers": pa.array(
            [None if i % 3 == 0 else [{"key": "h", "value": str(i).encode()},
                                      {"key": "n", "value": None}] for i in range(n)],
            headers),
    })


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_record_batches_read_back_by_a_kafka_consumer(bootstrap, topic_factory, codec):
    """The fast path's batches as confluent-kafka reads them: keys, values, headers, and
    each key in the partition librdkafka's own produce() puts it."""
    fast_topic, rdkafka_topic = topic_factory(partitions=3), topic_factory(partitions=3)
    batch = _rows(300)
    for topic, writer in ((fast_topic, "produce"), (rdkafka_topic, "librdkafka")):
        core = writers._RowProducer({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                     "writer": writer, "kafka.compression.type": codec})
        assert (core.fast is not None) == (writer == "produce")
        rows, _ = core.produce_all([batch.slice(0, 120), batch.slice(120)])
        assert rows == 300
    got = _consume_all(bootstrap, fast_topic, 3)
    want = _consume_all(bootstrap, rdkafka_topic, 3)

    def seen(msgs):
        return sorted((m.key() or b"", m.value() or b"", repr(m.headers())) for m in msgs)

    assert seen(got) == seen(want)
    assert len(got) == 300
    keyed = {m.key(): m.partition() for m in want if m.key()}
    assert {m.key(): m.partition() for m in got if m.key()} == keyed
    by_value = {(m.key(), m.value()): m.headers() for m in got}
    assert by_value[(b"key-1", b"v1")] == [("h", b"1"), ("n", None)]
    # Within a partition the rows keep their order.
    for p in range(3):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == sorted(offsets)


def test_record_batches_to_the_partition_column_and_topics(bootstrap, topic_factory):
    a, b = topic_factory(partitions=2), topic_factory(partitions=4)
    rb = pa.RecordBatch.from_pydict({
        "topic": [a, b, b, a, b],
        "partition": pa.array([1, 3, None, 0, 2], pa.int32()),
        "key": [b"k0", b"k1", b"k2", b"k3", b"k4"],
        "value": [b"v0", b"v1", b"v2", b"v3", b"v4"],
    })
    core = writers._RowProducer({"kafka.bootstrap.servers": bootstrap})
    assert core.produce_all([rb]) == (5, 0)
    placed = {m.value(): (m.topic(), m.partition()) for m in
              _consume_all(bootstrap, a, 2) + _consume_all(bootstrap, b, 4)}
    assert placed[b"v0"] == (a, 1) and placed[b"v1"] == (b, 3)
    assert placed[b"v3"] == (a, 0) and placed[b"v4"] == (b, 2)
    assert placed[b"v2"][0] == b
    bad = pa.RecordBatch.from_pydict({"partition": pa.array([9], pa.int32()), "value": [b"x"]})
    with pytest.raises(OptionError, match="partition 9"):
        writers._RowProducer({"kafka.bootstrap.servers": bootstrap, "topic": a}).produce_all([bad])


def test_transactional_record_batches_are_read_committed(bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    core = writers._RowProducer(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "transactional": "true"})
    assert core.fast is not None
    txn_id = writers.transactional_id(core.id_prefix, f"fast-{topic}", 0)
    result = core.transactional_write([_rows(200)], txn_id)
    assert result.rows == 200
    assert len(_consume_all(bootstrap, topic, 2, committed=True)) == 200
    # A write that fails mid-way aborts: its rows are never read committed.
    broken = pa.RecordBatch.from_pydict({"partition": pa.array([0, 7], pa.int32()),
                                         "value": [b"a", b"b"]})
    with pytest.raises(OptionError):
        core.transactional_write([_rows(50), broken], txn_id)
    assert len(_consume_all(bootstrap, topic, 2, committed=True)) == 200


def test_librdkafka_settings_the_fast_path_lacks_leave_it_to_librdkafka(bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    for extra in ({"kafka.acks": "0", "kafka.enable.idempotence": "false"},
                  {"kafka.sticky.partitioning.linger.ms": "5"},
                  {"writer": "librdkafka"}):
        core = writers._RowProducer({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                     **extra})
        assert core.fast is None
        assert core.produce_all([_rows(10)]) == (10, 0)
    with pytest.raises(OptionError, match="writer"):
        writers._RowProducer({"kafka.bootstrap.servers": bootstrap, "writer": "jvm"})
