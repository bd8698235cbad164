"""Consumer groups through aiokafka: an asyncio client with its own group protocol code."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from .helpers import create_topic

GROUP_CONFIG = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "300",
}


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(GROUP_CONFIG)


def make_consumer(bootstrap: str, group: str, topic: str, **extra: object) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        **extra,
    )


async def wait_for_cover(consumers: list[AIOKafkaConsumer], partitions: int) -> None:
    async def poll(c: AIOKafkaConsumer) -> None:
        await c.getmany(timeout_ms=100)

    for _ in range(600):
        await asyncio.gather(*(poll(c) for c in consumers))
        sets = [{tp.partition for tp in c.assignment()} for c in consumers]
        if (
            all(sets)
            and sum(len(s) for s in sets) == partitions
            and set().union(*sets) == set(range(partitions))
        ):
            return
    raise AssertionError(f"{len(consumers)} members never covered {partitions} partitions")


def test_three_members_split_six_partitions_then_one_leaves(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)

    async def go() -> None:
        members = [make_consumer(gbroker.bootstrap, group, topic) for _ in range(3)]
        try:
            await asyncio.gather(*(c.start() for c in members))
            await wait_for_cover(members, 6)
            await members.pop().stop()
            await wait_for_cover(members, 6)
        finally:
            await asyncio.gather(*(c.stop() for c in members))

    asyncio.run(asyncio.wait_for(go(), 120))


def test_commit_stop_and_resume_exactly_after_the_commit(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 1)

    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=gbroker.bootstrap)
        await producer.start()
        for i in range(10):
            await producer.send_and_wait(topic, f"v{i}".encode(), partition=0)
        await producer.stop()

        tp = TopicPartition(topic, 0)
        first = make_consumer(gbroker.bootstrap, group, topic)
        await first.start()
        got = []
        while len(got) < 4:
            batch = await first.getmany(timeout_ms=200, max_records=4 - len(got))
            got.extend(r for records in batch.values() for r in records)
        await first.commit({tp: OffsetAndMetadata(4, "after-four")})
        await first.stop()

        second = make_consumer(gbroker.bootstrap, group, topic)
        await second.start()
        try:
            first_record = await asyncio.wait_for(second.getone(), 60)
            assert (first_record.offset, first_record.value) == (4, b"v4")
            assert await second.committed(tp) == 4
        finally:
            await second.stop()

    asyncio.run(asyncio.wait_for(go(), 120))
