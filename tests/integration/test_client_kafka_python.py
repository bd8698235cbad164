"""kafka-python (pure Python protocol implementation) against a real chronik broker."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.codec import has_lz4, has_snappy, has_zstd

from .helpers import (
    BASE_TS,
    CODECS,
    POLL_TIMEOUT,
    Got,
    assert_round_trip,
    assert_stored_with,
    confluent_read,
    normalize_headers,
    sample_records,
    topic_name,
)

TIMEOUT_MS = 30_000


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        response = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=TIMEOUT_MS,
        )
        # kafka-python 3 raises on a topic error and returns the response as a dict.
        assert [t["error_code"] for t in response["topics"]] == [0], response
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, records, **config) -> list:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, request_timeout_ms=TIMEOUT_MS, **config
    )
    try:
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        producer.flush(POLL_TIMEOUT)
        return [f.get(timeout=POLL_TIMEOUT) for f in futures]
    finally:
        producer.close(timeout=10)


def consumer(bootstrap: str, **config) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        **config,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS + 5000,
        fetch_max_wait_ms=200,
    )


def read(c: KafkaConsumer, expected: int, timeout: float = POLL_TIMEOUT) -> list[Got]:
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            for r in records:
                got.append(
                    Got(
                        r.partition,
                        r.offset,
                        r.key,
                        r.value,
                        normalize_headers(r.headers),
                        r.timestamp,
                    )
                )
    return got


def _codec_param(codec: str):
    # kafka-python compresses with optional packages: python-snappy, lz4, zstandard.
    available = {"snappy": has_snappy, "lz4": has_lz4, "zstd": has_zstd}.get(codec, lambda: True)
    reason = f"kafka-python has no {codec} codec installed (pip install the test extras)"
    return pytest.param(codec, marks=pytest.mark.skipif(not available(), reason=reason))


@pytest.mark.parametrize("codec", [_codec_param(c) for c in CODECS])
def test_round_trip_every_codec(broker_process, codec):
    broker = broker_process  # a real `chronik serve` process
    topic = topic_name(codec)
    create_topic(broker.bootstrap, topic, 3)
    sent = sample_records(90, seed=11)
    metadata = produce(
        broker.bootstrap,
        topic,
        sent,
        acks="all",
        compression_type=None if codec == "none" else codec,
    )
    # Limits smaller than a batch: the broker still returns whole batches (KIP-74).
    c = consumer(broker.bootstrap, max_partition_fetch_bytes=1024, fetch_max_bytes=2048)
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        c.assign(partitions)
        c.seek_to_beginning(*partitions)
        got = read(c, len(sent))
    finally:
        c.close()
    assert_round_trip(sent, got, partitions=3)
    assert_stored_with(broker.bootstrap, topic, 3, codec)
    assert {(m.partition, m.offset) for m in metadata} == {(g.partition, g.offset) for g in got}
    # What another client library reads is the same.
    assert sorted(confluent_read(broker.bootstrap, topic, 3, len(sent)), key=_pos) == sorted(
        got, key=_pos
    )


def _pos(g: Got) -> tuple[int, int]:
    return (g.partition, g.offset)


def test_assign_and_seek(broker):
    topic = topic_name("seek")
    create_topic(broker.bootstrap, topic, 1)
    sent = sample_records(30, seed=12)
    produce(broker.bootstrap, topic, sent)
    tp = TopicPartition(topic, 0)
    c = consumer(broker.bootstrap)
    try:
        c.assign([tp])
        c.seek(tp, 10)
        got = read(c, 5)
        assert [g.offset for g in got[:5]] == [10, 11, 12, 13, 14]
        assert [g.value for g in got[:5]] == [s.value for s in sent[10:15]]
        c.seek(tp, 3)
        got = read(c, 1)
        assert (got[0].offset, got[0].value, got[0].timestamp) == (
            3,
            sent[3].value,
            sent[3].timestamp,
        )
        c.seek_to_end(tp)
        assert c.position(tp) == 30
    finally:
        c.close()


def test_offsets_earliest_latest_and_for_times(broker):
    topic = topic_name("offsets")
    create_topic(broker.bootstrap, topic, 1)
    sent = sample_records(40, seed=13)
    produce(broker.bootstrap, topic, sent, batch_size=2000)
    tp = TopicPartition(topic, 0)
    c = consumer(broker.bootstrap)
    try:
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 40}
        for ts, expected in {BASE_TS - 5: 0, BASE_TS + 1: 1, BASE_TS + 25_000: 25}.items():
            found = c.offsets_for_times({tp: ts})[tp]
            assert found is not None, f"no offset for {ts}"
            assert found.offset == expected
            assert found.timestamp == sent[expected].timestamp
        assert c.offsets_for_times({tp: BASE_TS + 99_000})[tp] is None
    finally:
        c.close()


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, acks):
    topic = topic_name(f"acks{acks}")
    create_topic(broker.bootstrap, topic, 2)
    sent = sample_records(50, seed=14)
    metadata = produce(broker.bootstrap, topic, sent, acks=acks)
    got = confluent_read(broker.bootstrap, topic, 2, 50)
    assert_round_trip(sent, got, partitions=2)
    if acks != 0:
        assert {(m.partition, m.offset) for m in metadata} == {(g.partition, g.offset) for g in got}


def test_idempotent_producer(broker):
    topic = topic_name("idem")
    create_topic(broker.bootstrap, topic, 3)
    sent = sample_records(200, seed=15)
    produce(broker.bootstrap, topic, sent, enable_idempotence=True, acks="all", batch_size=1000)
    got = confluent_read(broker.bootstrap, topic, 3, 200)
    assert_round_trip(sent, got, partitions=3)


def test_idempotent_producer_across_restart(broker):
    topic = topic_name("idemrestart")
    create_topic(broker.bootstrap, topic, 1)
    sent = sample_records(40, seed=16)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        enable_idempotence=True,
        acks="all",
        request_timeout_ms=TIMEOUT_MS,
        retry_backoff_ms=100,
        reconnect_backoff_ms=50,
    )
    try:
        for r in sent[:20]:
            producer.send(
                topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp
            ).get(timeout=POLL_TIMEOUT)
        broker.restart()
        futures = [
            producer.send(
                topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp
            )
            for r in sent[20:]
        ]
        producer.flush(POLL_TIMEOUT)
        offsets = [f.get(timeout=POLL_TIMEOUT).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(20, 40))
    assert_round_trip(sent, confluent_read(broker.bootstrap, topic, 1, 40), partitions=1)


@pytest.mark.parametrize("reset, expected", [("earliest", 0), ("latest", 5)])
def test_offset_out_of_range_resets(broker, reset, expected):
    topic = topic_name("oor")
    create_topic(broker.bootstrap, topic, 1)
    sent = sample_records(8, seed=17)
    produce(broker.bootstrap, topic, sent[:5])
    tp = TopicPartition(topic, 0)
    c = consumer(broker.bootstrap, auto_offset_reset=reset)
    try:
        c.assign([tp])
        c.seek(tp, 1000)
        if reset == "latest":
            assert read(c, 1, timeout=3) == []
            produce(broker.bootstrap, topic, sent[5:])
        got = read(c, 1, timeout=30)
        assert (got[0].offset, got[0].value) == (expected, sent[expected].value)
    finally:
        c.close()
