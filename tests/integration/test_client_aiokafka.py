"""aiokafka (asyncio, its own protocol code) against a real chronik broker."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

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


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=240))


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=TIMEOUT_MS,
        )
        errors = [t[1] for t in response.topic_errors]
        assert errors == [0], response
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records, **config) -> list:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, request_timeout_ms=TIMEOUT_MS, **config
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        await producer.flush()
        return await asyncio.gather(*futures)
    finally:
        await producer.stop()


def consumer(bootstrap: str, **config) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **config,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_MS + 5000,
        fetch_max_wait_ms=200,
    )


async def read(c: AIOKafkaConsumer, expected: int, timeout: float = POLL_TIMEOUT) -> list[Got]:
    got: list[Got] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        batches = await c.getmany(timeout_ms=500)
        for records in batches.values():
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


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker_process, codec):
    broker = broker_process  # a real `chronik serve` process
    topic = topic_name(codec)
    sent = sample_records(90, seed=21)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 3)
        metadata = await produce(
            broker.bootstrap,
            topic,
            sent,
            acks="all",
            compression_type=None if codec == "none" else codec,
        )
        # read_committed: the last stable offset must track the end of the log.
        c = consumer(
            broker.bootstrap, isolation_level="read_committed", max_partition_fetch_bytes=2048
        )
        await c.start()
        try:
            partitions = [TopicPartition(topic, p) for p in range(3)]
            c.assign(partitions)
            await c.seek_to_beginning(*partitions)
            return metadata, await read(c, len(sent))
        finally:
            await c.stop()

    metadata, got = run(scenario())
    assert_round_trip(sent, got, partitions=3)
    assert_stored_with(broker.bootstrap, topic, 3, codec)
    assert {(m.partition, m.offset) for m in metadata} == {(g.partition, g.offset) for g in got}


def test_assign_and_seek(broker):
    topic = topic_name("seek")
    sent = sample_records(30, seed=22)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 1)
        await produce(broker.bootstrap, topic, sent)
        tp = TopicPartition(topic, 0)
        c = consumer(broker.bootstrap)
        await c.start()
        try:
            c.assign([tp])
            c.seek(tp, 10)
            got = await read(c, 5)
            assert [g.offset for g in got[:5]] == [10, 11, 12, 13, 14]
            assert [g.value for g in got[:5]] == [s.value for s in sent[10:15]]
            c.seek(tp, 3)
            (first, *_) = await read(c, 1)
            assert (first.offset, first.value, first.timestamp) == (
                3,
                sent[3].value,
                sent[3].timestamp,
            )
            await c.seek_to_end(tp)
            assert await c.position(tp) == 30
        finally:
            await c.stop()

    run(scenario())


def test_offsets_earliest_latest_and_for_times(broker):
    topic = topic_name("offsets")
    sent = sample_records(40, seed=23)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 1)
        await produce(broker.bootstrap, topic, sent, max_batch_size=2000)
        tp = TopicPartition(topic, 0)
        c = consumer(broker.bootstrap)
        await c.start()
        try:
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 40}
            for ts, expected in {BASE_TS - 5: 0, BASE_TS + 1: 1, BASE_TS + 25_000: 25}.items():
                found = (await c.offsets_for_times({tp: ts}))[tp]
                assert found is not None, f"no offset for {ts}"
                assert (found.offset, found.timestamp) == (expected, sent[expected].timestamp)
            assert (await c.offsets_for_times({tp: BASE_TS + 99_000}))[tp] is None
        finally:
            await c.stop()

    run(scenario())


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, acks):
    topic = topic_name(f"acks{acks}")
    sent = sample_records(50, seed=24)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 2)
        return await produce(broker.bootstrap, topic, sent, acks=acks)

    metadata = run(scenario())
    got = confluent_read(broker.bootstrap, topic, 2, 50)
    assert_round_trip(sent, got, partitions=2)
    if acks != 0:
        assert {(m.partition, m.offset) for m in metadata} == {(g.partition, g.offset) for g in got}


def test_idempotent_producer(broker):
    topic = topic_name("idem")
    sent = sample_records(200, seed=25)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 3)
        await produce(broker.bootstrap, topic, sent, enable_idempotence=True, max_batch_size=1000)

    run(scenario())
    assert_round_trip(sent, confluent_read(broker.bootstrap, topic, 3, 200), partitions=3)


def test_idempotent_producer_across_restart(broker):
    topic = topic_name("idemrestart")
    sent = sample_records(40, seed=26)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 1)
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            enable_idempotence=True,
            request_timeout_ms=TIMEOUT_MS,
            retry_backoff_ms=100,
        )
        await producer.start()
        try:
            for r in sent[:20]:
                await producer.send_and_wait(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                )
            await asyncio.to_thread(broker.restart)
            offsets = []
            for r in sent[20:]:
                meta = await producer.send_and_wait(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                )
                offsets.append(meta.offset)
            return offsets
        finally:
            await producer.stop()

    assert run(scenario()) == list(range(20, 40))
    assert_round_trip(sent, confluent_read(broker.bootstrap, topic, 1, 40), partitions=1)


@pytest.mark.parametrize("reset, expected", [("earliest", 0), ("latest", 5)])
def test_offset_out_of_range_resets(broker, reset, expected):
    topic = topic_name("oor")
    sent = sample_records(8, seed=27)

    async def scenario():
        await create_topic(broker.bootstrap, topic, 1)
        await produce(broker.bootstrap, topic, sent[:5])
        tp = TopicPartition(topic, 0)
        c = consumer(broker.bootstrap, auto_offset_reset=reset)
        await c.start()
        try:
            c.assign([tp])
            c.seek(tp, 1000)
            if reset == "latest":
                assert await read(c, 1, timeout=3) == []
                await produce(broker.bootstrap, topic, sent[5:])
            got = await read(c, 1, timeout=30)
            assert (got[0].offset, got[0].value) == (expected, sent[expected].value)
        finally:
            await c.stop()

    run(scenario())
