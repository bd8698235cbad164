"""confluent-kafka (librdkafka 2.x) against a real chronik broker."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

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


def _next(consumer: Consumer):
    msg = wait_until(lambda: consumer.poll(0.5), "a record")
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
