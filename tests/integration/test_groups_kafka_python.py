"""Consumer groups through kafka-python: its own Join/Sync/Heartbeat implementation."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import NoOffsetForPartitionError

from .helpers import create_topic, wait_until

GROUP_CONFIG = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "300",
}


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(GROUP_CONFIG)


def make_consumer(bootstrap: str, group: str, **extra: object) -> KafkaConsumer:
    config: dict[str, object] = {
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 300,
        **extra,
    }
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **config)


class Member(threading.Thread):
    """kafka-python joins inside poll(), so each member polls on its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = make_consumer(bootstrap, group)
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.partitions: set[int] = set()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(timeout_ms=100)
            self.partitions = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def disjoint_cover(members: list[Member], partitions: int) -> bool:
    sets = [m.partitions for m in members]
    return (
        all(sets)
        and sum(len(s) for s in sets) == partitions
        and set().union(*sets) == set(range(partitions))
    )


def test_three_members_split_six_partitions_then_one_leaves(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)
    members = [Member(gbroker.bootstrap, group, topic) for _ in range(3)]
    try:
        for m in members:
            m.start()
        wait_until(lambda: disjoint_cover(members, 6), "three members covering 6 partitions")
        members.pop().stop()
        wait_until(lambda: disjoint_cover(members, 6), "two members covering 6 partitions")
    finally:
        for m in members:
            m.stop()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
    producer.flush(30)
    producer.close()


def drain(consumer: KafkaConsumer, count: int, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200, max_records=count - len(got)).values():
            got.extend(records)
    return got


def test_commit_stop_and_resume_exactly_after_the_commit(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 2)
    produce(gbroker.bootstrap, topic, 2, 10)
    first = make_consumer(gbroker.bootstrap, group)
    first.subscribe([topic])
    seen = drain(first, 7)
    assert len(seen) == 7
    last: dict[int, int] = {}
    for r in seen:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    first.commit({
        TopicPartition(topic, p): OffsetAndMetadata(o + 1, f"m{p}", -1) for p, o in last.items()
    })
    first.close()

    second = make_consumer(gbroker.bootstrap, group)
    try:
        second.subscribe([topic])
        rest = drain(second, 20 - 7)
        assert len(rest) == 13
        for p in range(2):
            offsets = [r.offset for r in rest if r.partition == p]
            assert offsets == list(range(last.get(p, -1) + 1, 10))
        committed = second.committed(TopicPartition(topic, 0), metadata=True)
        if 0 in last:
            assert (committed.offset, committed.metadata) == (last[0] + 1, "m0")
    finally:
        second.close()


def test_new_group_honours_auto_offset_reset(gbroker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 1)
    produce(gbroker.bootstrap, topic, 1, 5)
    tp = TopicPartition(topic, 0)

    earliest = make_consumer(gbroker.bootstrap, f"e-{uuid.uuid4().hex[:6]}")
    earliest.subscribe([topic])
    assert drain(earliest, 1)[0].offset == 0
    earliest.close()

    latest = make_consumer(gbroker.bootstrap, f"l-{uuid.uuid4().hex[:6]}",
                           auto_offset_reset="latest")
    latest.subscribe([topic])
    wait_until(lambda: latest.poll(timeout_ms=100) == {} and latest.assignment(), "assigned")
    assert latest.position(tp) == 5
    latest.close()

    none = make_consumer(gbroker.bootstrap, f"n-{uuid.uuid4().hex[:6]}", auto_offset_reset="none")
    none.subscribe([topic])
    try:
        with pytest.raises(NoOffsetForPartitionError):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert none.poll(timeout_ms=200) == {}
    finally:
        none.close()


CRASHING_MEMBER = """
import sys
from kafka import KafkaConsumer
c = KafkaConsumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                  session_timeout_ms=2000, heartbeat_interval_ms=300)
c.subscribe([sys.argv[3]])
while True:
    c.poll(timeout_ms=100)
"""


def test_killed_member_loses_partitions_after_session_timeout(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, gbroker.bootstrap, group, topic],
        stderr=subprocess.DEVNULL,
    )
    members = [Member(gbroker.bootstrap, group, topic) for _ in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(
            lambda: all(m.partitions for m in members)
            and sum(len(m.partitions) for m in members) < 6,
            "the subprocess member to own some partitions",
        )
        proc.kill()  # SIGKILL: no LeaveGroup
        proc.wait()
        wait_until(lambda: disjoint_cover(members, 6), "the survivors to own all 6 partitions")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for m in members:
            m.stop()
