"""Consumer groups through librdkafka (confluent-kafka): membership, rebalances, offsets."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from .helpers import create_topic, wait_until

# Short session timeouts keep the crash test quick; the broker must allow them.
GROUP_CONFIG = {
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "300",
}


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(GROUP_CONFIG)


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        **extra,
    }
    return Consumer(config)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def assignments(consumers: Iterable[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def wait_for_cover(consumers: list[Consumer], partitions: int, timeout: float = 60) -> None:
    """Poll every member until their assignments are a disjoint cover of all partitions."""

    def covered() -> bool:
        for c in consumers:
            c.poll(0.05)
        sets = assignments(consumers)
        everything = set().union(*sets)
        disjoint = sum(len(s) for s in sets) == partitions
        return everything == set(range(partitions)) and disjoint and all(sets)

    wait_until(covered, f"{len(consumers)} members covering {partitions} partitions", timeout)


def test_three_members_split_six_partitions_then_one_leaves(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)
    members = [consumer(gbroker.bootstrap, group) for _ in range(3)]
    try:
        for c in members:
            c.subscribe([topic])
        wait_for_cover(members, 6)
        leaving = members.pop()
        leaving.close()
        wait_for_cover(members, 6)
        assert sorted(len(s) for s in assignments(members)) == [3, 3]
    finally:
        for c in members:
            c.close()


@pytest.mark.parametrize("strategy", ["roundrobin", "cooperative-sticky"])
def test_assignors_work_through_the_coordinator(gbroker, strategy):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)
    members = []
    try:
        # Members arrive one by one, so the group rebalances as each joins.
        for _ in range(3):
            c = consumer(gbroker.bootstrap, group, **{"partition.assignment.strategy": strategy})
            c.subscribe([topic])
            members.append(c)
            wait_for_cover(members, 6)
        assert sorted(len(s) for s in assignments(members)) == [2, 2, 2]
    finally:
        for c in members:
            c.close()


CRASHING_MEMBER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                  "session.timeout.ms": 2000, "heartbeat.interval.ms": 300,
                  "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("assigned", flush=True)
    """
)


def test_killed_member_loses_partitions_after_session_timeout(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 6)
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, gbroker.bootstrap, group, topic],
        stdout=subprocess.PIPE,
    )
    members = [consumer(gbroker.bootstrap, group) for _ in range(2)]
    try:
        for c in members:
            c.subscribe([topic])

        def three_way_split() -> bool:
            for c in members:
                c.poll(0.05)
            sets = assignments(members)
            return all(sets) and sum(len(s) for s in sets) < 6

        wait_until(three_way_split, "the subprocess member to own some partitions", 60)
        proc.kill()  # SIGKILL: no LeaveGroup is sent
        proc.wait()
        killed_at = time.monotonic()
        wait_for_cover(members, 6)
        # The survivors only learn of it once the 2 s session has expired.
        assert time.monotonic() - killed_at >= 1.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in members:
            c.close()


def consume(c: Consumer, count: int, timeout: float = 60) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg)
    return got


def test_commit_stop_and_resume_exactly_after_the_commit(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 3)
    produce(gbroker.bootstrap, topic, 3, 20)
    first = consumer(gbroker.bootstrap, group)
    first.subscribe([topic])
    seen = consume(first, 25)
    assert len(seen) == 25
    last = {}
    for m in seen:
        last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
    committed = [TopicPartition(topic, p, o + 1, "meta-" + str(p)) for p, o in last.items()]
    first.commit(offsets=committed, asynchronous=False)
    first.close()

    # A new member of the same group starts exactly at the committed offsets.
    second = consumer(gbroker.bootstrap, group)
    try:
        second.subscribe([topic])
        rest = consume(second, 60 - 25)
        firsts: dict[int, int] = {}
        for m in rest:
            firsts.setdefault(m.partition(), m.offset())
        for p in range(3):
            assert firsts.get(p, 20) == last.get(p, -1) + 1
        assert len(rest) == 35
        got = second.committed([TopicPartition(topic, p) for p in last], timeout=10)
        assert {(tp.partition, tp.offset, tp.metadata) for tp in got} == {
            (tp.partition, tp.offset, tp.metadata) for tp in committed
        }
    finally:
        second.close()


def test_new_group_honours_auto_offset_reset(gbroker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 1)
    produce(gbroker.bootstrap, topic, 1, 10)

    earliest = consumer(gbroker.bootstrap, f"e-{uuid.uuid4().hex[:6]}")
    latest = consumer(
        gbroker.bootstrap, f"l-{uuid.uuid4().hex[:6]}", **{"auto.offset.reset": "latest"}
    )
    none = consumer(
        gbroker.bootstrap, f"n-{uuid.uuid4().hex[:6]}", **{"auto.offset.reset": "error"}
    )
    try:
        for c in (earliest, latest, none):
            c.subscribe([topic])
        assert consume(earliest, 1)[0].offset() == 0

        error = None
        deadline = time.monotonic() + 60
        while error is None and time.monotonic() < deadline:
            msg = none.poll(0.2)
            if msg is not None and msg.error():
                error = msg.error()
            assert msg is None or msg.error(), "a group with reset=none must not read"
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET

        # "latest" reads nothing old: only what is produced once it is positioned.
        wait_until(lambda: latest.poll(0.1) is None and latest.assignment(), "latest assigned")
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            assert latest.poll(0.1) is None
        produce(gbroker.bootstrap, topic, 1, 1)
        assert consume(latest, 1)[0].offset() == 10
    finally:
        for c in (earliest, latest, none):
            c.close()


def test_static_member_rejoins_without_moving_partitions(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 4)
    a = consumer(gbroker.bootstrap, group, **{"group.instance.id": "a"})
    b = consumer(gbroker.bootstrap, group, **{"group.instance.id": "b"})
    try:
        for c in (a, b):
            c.subscribe([topic])
        wait_for_cover([a, b], 4)
        before = assignments([a, b])
        # A static member leaving on close does not send LeaveGroup; its return with
        # the same instance id gets the same partitions back.
        a.close()
        a = consumer(gbroker.bootstrap, group, **{"group.instance.id": "a"})
        a.subscribe([topic])
        wait_for_cover([a, b], 4)
        assert assignments([a, b]) == before
    finally:
        a.close()
        b.close()


def test_admin_lists_describes_and_deletes_groups(gbroker):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(gbroker.bootstrap, topic, 2)
    c = consumer(gbroker.bootstrap, group)
    c.subscribe([topic])
    wait_for_cover([c], 2)
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    assert group in listed
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert str(desc.state).endswith("STABLE")
    assert [
        sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members
    ] == [[0, 1]]
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
        admin.delete_consumer_groups([group])[group].result(timeout=30)
    c.close()
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    assert group not in listed
