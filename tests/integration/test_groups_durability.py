"""Committed offsets outlive the broker: graceful restart, and kill -9 right after a commit."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from .helpers import create_topic


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: (tp.offset, tp.metadata) for tp in got}
    finally:
        c.close()


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    # assign() + commit: offsets committed outside group management (generation -1).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign(offsets)
        c.commit(offsets=offsets, asynchronous=False)
    finally:
        c.close()


@pytest.mark.slow
def test_committed_offsets_survive_restart_and_kill(broker_process):
    bootstrap = broker_process.bootstrap
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 3)
    commit(bootstrap, group, [TopicPartition(topic, p, 10 + p, f"m{p}") for p in range(3)])
    commit(bootstrap, group, [TopicPartition(topic, 1, 42, "newer")])
    expected = {0: (10, "m0"), 1: (42, "newer"), 2: (12, "m2")}
    assert committed(bootstrap, group, topic, 3) == expected

    assert broker_process.terminate() == 0
    broker_process.start()
    assert committed(bootstrap, group, topic, 3) == expected

    # An acknowledged commit is on disk: SIGKILL straight after it loses nothing.
    commit(bootstrap, group, [TopicPartition(topic, 2, 99, "before-kill")])
    broker_process.kill()
    broker_process.start()
    expected[2] = (99, "before-kill")
    assert committed(bootstrap, group, topic, 3) == expected

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    assert group in listed


@pytest.mark.slow
def test_deleted_group_and_topic_offsets_stay_deleted_after_restart(broker_process):
    bootstrap = broker_process.bootstrap
    topic, other = f"t-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    gone, kept = f"g-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, other, 1)
    commit(bootstrap, gone, [TopicPartition(topic, 0, 5)])
    commit(bootstrap, kept, [TopicPartition(topic, 0, 6), TopicPartition(other, 0, 7)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups([gone])[gone].result(timeout=30)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)

    broker_process.kill()
    broker_process.start()
    listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    assert gone not in listed and kept in listed
    assert committed(bootstrap, kept, other, 1)[0][0] == 7
    # The deleted topic's offsets went with it.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": kept})
    try:
        assert c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset < 0
    finally:
        c.close()
