"""confluent-kafka (librdkafka 2.x) against a real chronik broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_END,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, OffsetSpec

from .helpers import (
    BASE_TS,
    CODECS,
    POLL_TIMEOUT,
    assert_round_trip,
    assert_stored_with,
    confluent_got,
    confluent_produce,
    confluent_read,
    create_topic,
    sample_records,
    topic_name,
    wait_until,
)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker_process, codec):
    broker = broker_process  # a real `chronik serve` process
    topic = topic_name(codec)
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = sample_records(90, seed=1)
    delivered = confluent_produce(
        broker.bootstrap, topic, sent, **{"compression.type": codec, "acks": "all"}
    )
    got = confluent_read(broker.bootstrap, topic, 3, len(sent))
    assert_round_trip(sent, got, partitions=3)
    assert_stored_with(broker.bootstrap, topic, 3, codec)
    # The offsets the producer was told are the offsets the records are read at.
    told = {(m.partition(), m.offset()): m.value() for m in delivered}
    assert told == {(g.partition, g.offset): g.value for g in got}


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic_name("seek"),
            "enable.auto.commit": False,
        }
    )


def _next(consumer: Consumer, timeout: float = POLL_TIMEOUT):
    # A Message's truth is its value's length, so test for None, not falsiness.
    (msg,) = wait_until(
        lambda: [m for m in [consumer.poll(0.5)] if m is not None], "a record", timeout=timeout
    )
    assert msg.error() is None, msg.error()
    return msg


def test_assign_and_seek(broker):
    topic = topic_name("seek")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = sample_records(30, seed=2)
    confluent_produce(broker.bootstrap, topic, sent)
    consumer = _consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 10)])
        first = [_next(consumer) for _ in range(5)]
        assert [m.offset() for m in first] == [10, 11, 12, 13, 14]
        assert [m.value() for m in first] == [s.value for s in sent[10:15]]

        consumer.seek(TopicPartition(topic, 0, 3))
        msg = _next(consumer)
        assert (msg.offset(), msg.value()) == (3, sent[3].value)

        consumer.seek(TopicPartition(topic, 0, 29))
        last = _next(consumer)
        assert confluent_got(last).timestamp == sent[29].timestamp
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == 30
    finally:
        consumer.close()


def test_assign_at_end_sees_only_new_records(broker):
    topic = topic_name("tail")
    create_topic(broker.bootstrap, topic, partitions=1)
    confluent_produce(broker.bootstrap, topic, sample_records(5, seed=3))
    consumer = _consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        stray = consumer.poll(1.0)
        assert stray is None, (stray.error(), stray.offset())
        later = sample_records(8, seed=4)[5:]
        confluent_produce(broker.bootstrap, topic, later)
        msg = _next(consumer)
        assert (msg.offset(), msg.value()) == (5, later[0].value)
    finally:
        consumer.close()


def test_watermarks_and_offsets_for_times(broker):
    topic = topic_name("offsets")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = sample_records(40, seed=5)
    confluent_produce(broker.bootstrap, topic, sent, **{"batch.num.messages": 7})
    consumer = _consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 40)
        queries = {
            BASE_TS - 5: 0,  # before everything: the first record
            BASE_TS: 0,
            BASE_TS + 1: 1,  # between records: the next one
            BASE_TS + 17_000: 17,
            BASE_TS + 39_000: 39,
        }
        for ts, expected in queries.items():
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)
            assert tp.error is None
            assert tp.offset == expected, f"offset for timestamp {ts}"
        (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 99_000)], 30)
        assert tp.offset == OFFSET_END  # no record at or after it: -1
    finally:
        consumer.close()


def test_admin_list_offsets(broker):
    topic = topic_name("listoffsets")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = sample_records(20, seed=6)
    confluent_produce(broker.bootstrap, topic, [s for s in sent], **{"partitioner": "murmur2"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    counts = {}
    for p in (0, 1):
        tp = TopicPartition(topic, p)
        latest = admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(timeout=30)
        earliest = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=30)
        assert earliest.offset == 0
        counts[p] = latest.offset
    assert sum(counts.values()) == 20
    got = confluent_read(broker.bootstrap, topic, 2, 20)
    first_of = {}
    for g in sorted(got, key=lambda g: g.offset):
        first_of.setdefault(g.partition, g)
    for p, g in first_of.items():
        tp = TopicPartition(topic, p)
        found = admin.list_offsets({tp: OffsetSpec.for_timestamp(g.timestamp)})[tp]
        info = found.result(timeout=30)
        assert (info.offset, info.timestamp) == (0, g.timestamp)
    tp = TopicPartition(topic, 0)
    info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    p0 = [g for g in got if g.partition == 0]
    newest = max(p0, key=lambda g: g.timestamp)
    assert (info.offset, info.timestamp) == (newest.offset, newest.timestamp)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, acks):
    topic = topic_name(f"acks{acks}")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = sample_records(50, seed=7)
    delivered = confluent_produce(broker.bootstrap, topic, sent, acks=acks)
    assert len(delivered) == 50
    got = confluent_read(broker.bootstrap, topic, 2, 50)
    assert_round_trip(sent, got, partitions=2)
    if acks != "0":
        told = {(m.partition(), m.offset()) for m in delivered}
        assert told == {(g.partition, g.offset) for g in got}


def test_idempotent_producer_writes_each_record_once(broker):
    topic = topic_name("idem")
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = sample_records(300, seed=8)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    errors = []
    for i, r in enumerate(sent):
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            timestamp=r.timestamp,
            on_delivery=lambda err, msg: err and errors.append(err),
        )
        if i % 50 == 49:
            producer.flush(POLL_TIMEOUT)
    assert producer.flush(POLL_TIMEOUT) == 0
    assert not errors, errors[:3]
    got = confluent_read(broker.bootstrap, topic, 3, 300)
    assert_round_trip(sent, got, partitions=3)


def test_idempotent_producer_survives_broker_restart(broker):
    """Producer state is recovered: the same producer keeps its id and sequence
    numbers across a restart without OUT_OF_ORDER_SEQUENCE or a fatal error."""
    topic = topic_name("idemrestart")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = sample_records(40, seed=9)
    errors = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "reconnect.backoff.ms": 50,
            "error_cb": errors.append,
        }
    )

    def produce(records):
        for r in records:
            producer.produce(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                timestamp=r.timestamp,
                on_delivery=lambda err, msg: err and errors.append(err),
            )
        assert producer.flush(POLL_TIMEOUT) == 0

    produce(sent[:20])
    broker.restart()
    produce(sent[20:])
    fatal = [e for e in errors if getattr(e, "fatal", lambda: False)()]
    assert not fatal, fatal
    got = confluent_read(broker.bootstrap, topic, 1, 40)
    assert_round_trip(sent, got, partitions=1)


def test_null_keys_values_and_no_headers(broker):
    topic = topic_name("nulls")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip"})
    producer.produce(topic, key=None, value=b"no key", timestamp=BASE_TS)
    producer.produce(topic, key=b"tombstone", value=None, timestamp=BASE_TS + 1)
    producer.produce(topic, key=b"", value=b"", timestamp=BASE_TS + 2)
    assert producer.flush(POLL_TIMEOUT) == 0
    got = confluent_read(broker.bootstrap, topic, 1, 3)
    assert [(g.offset, g.key, g.value, g.headers) for g in got] == [
        (0, None, b"no key", ()),
        (1, b"tombstone", None, ()),
        (2, b"", b"", ()),
    ]


def test_small_fetch_limits_still_make_progress(broker):
    """A batch bigger than max.partition.fetch.bytes / fetch.max.bytes is still
    returned whole (KIP-74), so a consumer with small limits is never stuck."""
    topic = topic_name("fetchlimits")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = [
        r.__class__(r.key, r.value + bytes(6000), r.headers, r.timestamp)
        for r in sample_records(40, seed=10)
    ]
    confluent_produce(broker.bootstrap, topic, sent, **{"batch.num.messages": 5})
    got = confluent_read(
        broker.bootstrap,
        topic,
        2,
        len(sent),
        **{
            "max.partition.fetch.bytes": 1024,
            "fetch.max.bytes": 2048,
            "message.max.bytes": 1000,
        },
    )
    assert_round_trip(sent, got, partitions=2)


def test_oversized_record_is_refused(broker_factory):
    broker = broker_factory({"message.max.bytes": "20000"})
    topic = topic_name("toolarge")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1_000_000})
    results = []
    producer.produce(topic, value=bytes(50_000), on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(POLL_TIMEOUT) == 0
    # Separately: a batch holding both would be refused as a whole, as Kafka does.
    producer.produce(topic, value=b"small", on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(POLL_TIMEOUT) == 0
    assert results[0] is not None and results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results[1] is None
    got = confluent_read(broker.bootstrap, topic, 1, 1)
    assert [(g.offset, g.value) for g in got] == [(0, b"small")]


def test_log_append_time_topic(broker):
    topic = topic_name("appendtime")
    create_topic(
        broker.bootstrap, topic, partitions=1, **{"message.timestamp.type": "LogAppendTime"}
    )
    before = int(time.time() * 1000)
    confluent_produce(broker.bootstrap, topic, sample_records(10, seed=11))
    after = int(time.time() * 1000)
    consumer = _consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msgs = [_next(consumer) for _ in range(10)]
    finally:
        consumer.close()
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000


def test_topic_compression_type_recompresses(broker):
    topic = topic_name("topiccodec")
    create_topic(broker.bootstrap, topic, partitions=1, **{"compression.type": "zstd"})
    sent = sample_records(30, seed=12)
    confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": "gzip"})
    got = confluent_read(broker.bootstrap, topic, 1, len(sent))
    assert_round_trip(sent, got, partitions=1)
    assert_stored_with(broker.bootstrap, topic, 1, "zstd")


def test_produce_to_unknown_topic_without_auto_create(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    results = []
    producer.produce("nowhere", value=b"x", on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "nowhere" not in admin.list_topics(timeout=30).topics


@pytest.mark.parametrize("reset, expected", [("earliest", 0), ("latest", 5)])
def test_offset_out_of_range_resets(broker, reset, expected):
    """Fetching past the end answers OFFSET_OUT_OF_RANGE, and the client resets."""
    topic = topic_name("oor")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = sample_records(8, seed=13)
    confluent_produce(broker.bootstrap, topic, sent[:5])
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic_name("oor"),
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 1000)])
        if reset == "latest":
            # Nothing arrives until something new is written after the reset.
            assert consumer.poll(2.0) is None
            confluent_produce(broker.bootstrap, topic, sent[5:])
        msg = _next(consumer, timeout=20)
        assert (msg.offset(), msg.value()) == (expected, sent[expected].value)
    finally:
        consumer.close()


def test_empty_partition_offsets(broker):
    topic = topic_name("empty")
    create_topic(broker.bootstrap, topic, partitions=2)
    consumer = _consumer(broker.bootstrap)
    try:
        for p in (0, 1):
            tp = TopicPartition(topic, p)
            assert consumer.get_watermark_offsets(tp, timeout=30) == (0, 0)
            (found,) = consumer.offsets_for_times([TopicPartition(topic, p, BASE_TS)], 30)
            assert found.offset == OFFSET_END
    finally:
        consumer.close()


def test_delete_and_recreate_starts_empty(broker):
    topic = topic_name("recreate")
    create_topic(broker.bootstrap, topic, partitions=1)
    old = sample_records(10, seed=14)
    confluent_produce(broker.bootstrap, topic, old, **{"enable.idempotence": True})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    wait_until(lambda: topic not in admin.list_topics(timeout=30).topics, "topic deleted")
    create_topic(broker.bootstrap, topic, partitions=2)
    new = sample_records(20, seed=15)[10:]
    confluent_produce(broker.bootstrap, topic, new, **{"enable.idempotence": True})
    got = confluent_read(broker.bootstrap, topic, 2, len(new))
    assert_round_trip(new, got, partitions=2)
    # A second read sees the same records (partitions interleave in any order).
    again = confluent_read(broker.bootstrap, topic, 2, len(new) + 1, timeout=3)
    assert sorted(again, key=lambda g: (g.partition, g.offset)) == sorted(
        got, key=lambda g: (g.partition, g.offset)
    )


def test_one_producer_many_topics(broker):
    topics = [topic_name(f"multi{i}") for i in range(3)]
    for t in topics:
        create_topic(broker.bootstrap, t, partitions=2)
    sent = sample_records(90, seed=16)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i, r in enumerate(sent):
        producer.produce(
            topics[i % 3], key=r.key, value=r.value, headers=list(r.headers), timestamp=r.timestamp
        )
    assert producer.flush(POLL_TIMEOUT) == 0
    for i, t in enumerate(topics):
        mine = sent[i::3]
        assert_round_trip(mine, confluent_read(broker.bootstrap, t, 2, len(mine)), partitions=2)


def test_topic_configs_are_described_and_survive_restart(broker):
    topic = topic_name("configs")
    create_topic(broker.bootstrap, topic, partitions=1, **{"retention.ms": "123456789"})

    def described() -> dict:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        return admin.describe_configs([resource])[resource].result(timeout=30)

    entries = described()
    assert entries["retention.ms"].value == "123456789"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].is_default
    broker.restart()
    assert described()["retention.ms"].value == "123456789"


def test_broker_configs_are_described(broker_factory):
    broker = broker_factory({"num.partitions": "3"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=30)
    (node_id,) = md.brokers
    resource = ConfigResource(ConfigResource.Type.BROKER, str(node_id))
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    assert entries["num.partitions"].value == "3"


@pytest.mark.slow
def test_idempotent_producer_through_kill_9(broker_process):
    """The broker is SIGKILLed while an idempotent producer has batches in flight.
    After restart the producer retries them: every record is stored exactly once,
    in send order, and each delivered offset holds the record it was reported for."""
    broker = broker_process
    topic = topic_name("idemkill")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = sample_records(3000, seed=17)
    delivered = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.offset()] = msg.value()

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 50,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 100,
        }
    )
    for i, r in enumerate(sent):
        producer.produce(
            topic, key=r.key, value=r.value, timestamp=r.timestamp, on_delivery=on_delivery
        )
        if i == 1500:
            producer.poll(0)
            # Delivery callbacks run inside poll().
            wait_until(lambda: producer.poll(0.1) >= 0 and delivered, "first deliveries")
            broker.kill()
            broker.start()
        producer.poll(0)
    assert producer.flush(POLL_TIMEOUT * 2) == 0
    assert not errors, errors[:3]
    got = confluent_read(broker.bootstrap, topic, 1, len(sent))
    assert [g.value for g in got] == [s.value for s in sent]
    assert [g.offset for g in got] == list(range(len(sent)))
    assert delivered == {g.offset: g.value for g in got}


def test_large_records(broker):
    topic = topic_name("large")
    create_topic(broker.bootstrap, topic, partitions=1)
    base = sample_records(4, seed=18)
    sent = [
        s.__class__(s.key, s.value + bytes([i]) * 900_000, s.headers, s.timestamp)
        for i, s in enumerate(base)
    ]
    confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": "none"})
    got = confluent_read(broker.bootstrap, topic, 1, len(sent))
    assert_round_trip(sent, got, partitions=1)
