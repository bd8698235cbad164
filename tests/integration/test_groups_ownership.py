"""A coordinator that owns only some partitions of __consumer_offsets, as in a cluster.

The coordinator runs on a real catalog and real logs; the cluster around it is a stub
saying how many partitions each topic has and which __consumer_offsets partitions this
broker leads. The last test drives the group APIs on the wire against an embedded broker.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chronik.coordinator.committed_offsets import CommitRequest
from chronik.coordinator.group import GroupState
from chronik.coordinator.group_coordinator import GroupCoordinator
from chronik.coordinator.offsets_codec import partition_for
from chronik.coordinator.offsets_topic import TOPIC
from chronik.storage.catalog import Catalog
from chronik.storage.group_commit import GroupCommitter
from chronik.storage.partition_writer import PartitionWriter

from .helpers import RawClient, code, create_topic, nested, req

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
REBALANCE_IN_PROGRESS = 27
OFFSETS_PARTITIONS = 4


class StubReplicas:
    """Replication as with one replica: every write is in its ISR at once."""

    def not_enough_replicas(self, topic: str, partition: int) -> str | None:
        return None

    def leader_appended(self, partition_log: object) -> None:
        pass

    async def wait_replicated(
        self, topic: str, partition: int, offset: int, timeout: float
    ) -> tuple[int, str | None]:
        return NONE, None


class StubCluster:
    """What the coordinator asks of broker.cluster: partition counts and leadership."""

    node_id = 1

    def __init__(self, counts: dict[str, int], led: set[int]) -> None:
        self.counts = counts
        self.led = led  # partitions of __consumer_offsets this broker leads
        self.replicas = StubReplicas()

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    def is_local_leader(self, topic: str, partition: int) -> bool:
        return topic != TOPIC or partition in self.led

    def leader_of(self, topic: str, partition: int) -> int:
        return 1 if self.is_local_leader(topic, partition) else 2

    def controller_id(self) -> int:
        return 1

    def live_brokers(self) -> list[object]:
        return []


class Node:
    """The parts of a broker the coordinator uses: config, catalog, committer, cluster."""

    def __init__(self, data_dir: Path, cluster: StubCluster, local: set[int] | None) -> None:
        self.config = {
            "group.min.session.timeout.ms": "10",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.catalog = Catalog(data_dir)
        self.catalog.load()
        self.committer = GroupCommitter()
        self.writer = PartitionWriter(self.committer, lambda log: None)
        self.writer.attach(cluster.replicas, lambda: True)
        self.cluster = cluster
        if local is not None and self.catalog.get(TOPIC) is None:
            # Created by the controller; this broker stores only the partitions it holds.
            topic = self.catalog.create_topic(
                TOPIC, OFFSETS_PARTITIONS, {"cleanup.policy": "compact"}
            )
        if local is not None:
            topic = self.catalog.get(TOPIC)
            for p, plog in enumerate(topic.partitions):
                if p not in local and plog is not None:
                    plog.close()
                    topic.partitions[p] = None

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def close(self) -> None:
        for topic in self.catalog.topics.values():
            topic.partitions = [p for p in topic.partitions if p is not None]
        self.catalog.close()


def group_in(partition: int, prefix: str = "g") -> str:
    for i in range(10_000):
        name = f"{prefix}-{i}"
        if partition_for(name, OFFSETS_PARTITIONS) == partition:
            return name
    raise AssertionError("no group name found")


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


async def join(c: GroupCoordinator, group: str, member: str = "") -> object:
    return await c.join_group(
        group, member, None, "client", "/127.0.0.1", 5000, 5000, "consumer",
        [("range", subscription("t"))], False,
    )


async def stable_member(c: GroupCoordinator, group: str) -> str:
    joined = await join(c, group)
    assert joined.error == NONE
    synced = await c.sync_group(group, joined.generation, joined.member_id, None, None, None,
                                {joined.member_id: b"a"})
    assert synced.error == NONE
    return joined.member_id


def commit(c: GroupCoordinator, group: str, offset: int, topic: str = "t", partition: int = 0):
    return c.commit_offsets(group, -1, "", None,
                            [CommitRequest(topic, partition, offset, -1, "md")])


def offsets(c: GroupCoordinator, group: str) -> tuple[int, list[tuple[str, int, int]]]:
    err, fetched = c.fetch_offsets(group, None)
    return err, [(f.topic, f.partition, f.offset) for f in fetched]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.fixture
def node(tmp_path):
    made: list[Node] = []

    def make(led=frozenset({0, 1}), local=frozenset({0, 1}), counts=None) -> Node:
        cluster = StubCluster(
            counts if counts is not None else {TOPIC: OFFSETS_PARTITIONS, "t": 3}, set(led)
        )
        n = Node(tmp_path / "data", cluster, None if local is None else set(local))
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()


def test_cluster_start_creates_nothing_and_serves_no_group(node):
    async def main():
        n = node(local=None, counts={"t": 3})  # __consumer_offsets not created yet
        c = GroupCoordinator(n)
        await c.start()
        assert n.catalog.get(TOPIC) is None
        assert c.coordinator_error("g") == NOT_COORDINATOR
        assert (await join(c, "g")).error == NOT_COORDINATOR
        assert await commit(c, "g", 5) == [NOT_COORDINATOR]
        assert c.fetch_offsets("g", None) == (NOT_COORDINATOR, [])
        await c.stop()

    run(main())


def test_loaded_partition_serves_its_groups_only(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        mine, loaded_later, elsewhere = group_in(0), group_in(1), group_in(2)
        assert c.coordinator_error(mine) == NOT_COORDINATOR
        await c.load_partition(0)
        await c.load_partition(0)  # idempotent
        assert c.coordinator_error(mine) is None
        # "t" exists in the cluster, not in this broker's catalog.
        assert n.catalog.get("t") is None
        assert await commit(c, mine, 7) == [NONE]
        assert await commit(c, mine, 1, "t", 3) == [UNKNOWN_TOPIC_OR_PARTITION]
        assert await commit(c, mine, 1, "nope") == [UNKNOWN_TOPIC_OR_PARTITION]
        assert offsets(c, mine) == (NONE, [("t", 0, 7)])

        for other in (loaded_later, elsewhere):
            assert await commit(c, other, 3) == [NOT_COORDINATOR]
            assert c.fetch_offsets(other, None) == (NOT_COORDINATOR, [])
            assert c.describe_group(other).error == NOT_COORDINATOR
            assert await c.delete_groups([other]) == [NOT_COORDINATOR]
            assert await c.delete_offsets(other, [("t", 0)]) == (NOT_COORDINATOR, [])
            assert c.heartbeat(other, 1, "m", None) == NOT_COORDINATOR
            assert c.leave_group(other, [("m", None)]) == (NOT_COORDINATOR, [])
            assert (await c.sync_group(other, 1, "m", None, None, None, {})).error == (
                NOT_COORDINATOR
            )
        assert [g for g, _, _ in c.list_groups()] == [mine]
        assert c.listing_error() == NONE
        await c.stop()

    run(main())


def test_unload_answers_held_join_and_spares_other_partitions(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        await c.load_partition(1)
        a, b = group_in(0), group_in(1)
        await stable_member(c, a)
        b_first = await stable_member(c, b)
        # A second member each: both JoinGroups wait for the first member to rejoin.
        held_a = asyncio.ensure_future(join(c, a))
        held_b = asyncio.ensure_future(join(c, b))
        await asyncio.sleep(0.05)
        assert not held_a.done() and not held_b.done()
        group_a = c.groups[a]

        c.unload_partition(0)
        result = await asyncio.wait_for(held_a, 1)
        assert result.error == NOT_COORDINATOR
        assert a not in c.groups and group_a.state is GroupState.DEAD
        assert group_a.join_timer is None
        assert all(m.session_timer is None for m in group_a.members.values())
        assert c.coordinator_error(a) == NOT_COORDINATOR
        assert [g for g, _, _ in c.list_groups()] == [b]

        # The other partition's rebalance goes on: the first member rejoins, both get gen 2.
        assert not held_b.done()
        rejoined = await join(c, b, b_first)
        assert (rejoined.error, rejoined.generation) == (NONE, 2)
        assert (await held_b).generation == 2
        await c.stop()

    run(main())


def test_reload_after_unload_restores_offsets_and_groups(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        a = group_in(0)
        assert await commit(c, a, 11) == [NONE]
        assert await commit(c, a, 12, "t", 2) == [NONE]
        managed = group_in(0, "managed")
        await stable_member(c, managed)
        assert await c.commit_offsets(
            managed, 1, next(iter(c.groups[managed].members)), None,
            [CommitRequest("t", 1, 99, -1, "")],
        ) == [NONE]

        c.unload_partition(0)
        assert c.fetch_offsets(a, None) == (NOT_COORDINATOR, [])
        await c.load_partition(0)
        assert offsets(c, a) == (NONE, [("t", 0, 11), ("t", 2, 12)])
        assert offsets(c, managed) == (NONE, [("t", 1, 99)])
        described = c.describe_group(managed)
        assert (described.error, described.state, described.protocol_type) == (
            NONE, "Empty", "consumer"
        )
        # The next generation follows the stored one.
        assert (await join(c, managed)).generation == 2
        await c.stop()

        # Another coordinator (the next leader, or this broker restarted) reads the same log.
        again = GroupCoordinator(n)
        await again.start()
        assert again.fetch_offsets(a, None) == (NOT_COORDINATOR, [])
        await again.load_partition(0)
        assert offsets(again, a) == (NONE, [("t", 0, 11), ("t", 2, 12)])
        await again.stop()

    run(main())


class GatedLog:
    """A partition log whose reads wait for a gate, so a load can be watched midway."""

    def __init__(self, plog, gate: asyncio.Event) -> None:
        self._plog = plog
        self._gate = gate

    def __getattr__(self, name):
        return getattr(self._plog, name)

    async def read(self, offset, max_bytes):
        await self._gate.wait()
        return self._plog.read(offset, max_bytes)


def test_load_in_progress_until_the_replay_ends(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        a = group_in(0)
        assert await commit(c, a, 5) == [NONE]
        c.unload_partition(0)

        gate = asyncio.Event()
        topic = n.catalog.get(TOPIC)
        real = topic.partitions[0]
        topic.partitions[0] = GatedLog(real, gate)
        loading = asyncio.ensure_future(c.load_partition(0))
        second = asyncio.ensure_future(c.load_partition(0))
        await asyncio.sleep(0.05)
        assert c.coordinator_error(a) == COORDINATOR_LOAD_IN_PROGRESS
        assert await commit(c, a, 6) == [COORDINATOR_LOAD_IN_PROGRESS]
        assert c.fetch_offsets(a, None) == (COORDINATOR_LOAD_IN_PROGRESS, [])
        assert (await join(c, a)).error == COORDINATOR_LOAD_IN_PROGRESS
        assert c.heartbeat(a, 1, "m", None) == NONE  # answered blindly, as Kafka does
        assert (await c.sync_group(a, 1, "m", None, None, None, {})).error == (
            REBALANCE_IN_PROGRESS
        )
        assert c.describe_group(a).error == COORDINATOR_LOAD_IN_PROGRESS
        assert c.listing_error() == COORDINATOR_LOAD_IN_PROGRESS
        assert c.coordinator_error(group_in(1)) == NOT_COORDINATOR
        assert not second.done()

        gate.set()
        await asyncio.wait_for(asyncio.gather(loading, second), 5)
        topic.partitions[0] = real
        assert c.coordinator_error(a) is None
        assert offsets(c, a) == (NONE, [("t", 0, 5)])
        assert c.listing_error() == NONE
        await c.stop()

    run(main())


def test_unload_during_load_discards_the_replay(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        a = group_in(0)
        assert await commit(c, a, 5) == [NONE]
        c.unload_partition(0)

        gate = asyncio.Event()
        topic = n.catalog.get(TOPIC)
        real = topic.partitions[0]
        topic.partitions[0] = GatedLog(real, gate)
        loading = asyncio.ensure_future(c.load_partition(0))
        await asyncio.sleep(0.05)
        c.unload_partition(0)
        gate.set()
        await asyncio.wait_for(loading, 5)
        topic.partitions[0] = real
        assert c.coordinator_error(a) == NOT_COORDINATOR
        assert a not in c.groups
        await c.stop()

    run(main())


def test_write_to_a_partition_no_longer_led_is_not_coordinator(node):
    async def main():
        n = node()
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        a = group_in(0)
        assert await commit(c, a, 5) == [NONE]
        n.cluster.led.discard(0)  # leadership moved; the unload has not come yet
        assert await commit(c, a, 6) == [NOT_COORDINATOR]
        assert offsets(c, a) == (NONE, [("t", 0, 5)])
        await c.stop()

    run(main())


def test_offsets_of_a_loaded_group_expire(node):
    async def main():
        n = node()
        n.config["offsets.retention.minutes"] = "1"
        c = GroupCoordinator(n)
        await c.start()
        await c.load_partition(0)
        a = group_in(0)
        assert await commit(c, a, 5) == [NONE]
        c.offsets.expire(n.now_ms() + 120_000)
        await asyncio.sleep(0.1)  # the tombstones are written in the background
        assert a not in c.groups
        c.unload_partition(0)
        await c.load_partition(0)
        assert offsets(c, a) == (NONE, [])
        await c.stop()

    run(main())


# ---------------------------------------------------------------- on the wire


def on_loop(embedded, fn):
    """Run fn (a coroutine function or a plain one) on the broker's event loop."""

    async def call():
        result = fn()
        if asyncio.iscoroutine(result):
            result = await result
        return result

    return asyncio.run_coroutine_threadsafe(call(), embedded._loop).result(10)


def join_req(group: str, member: str = "") -> object:
    protocol = nested(11, 3, "JoinGroupRequestProtocol", name="range", metadata=b"m")
    return req(11, 3, group_id=group, session_timeout=10000, rebalance_timeout=10000,
               member_id=member, protocol_type="consumer", protocols=(protocol,))


def test_group_apis_answer_not_coordinator_for_an_unloaded_partition(broker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    coordinator = broker.broker.coordinator
    partition = partition_for(group, coordinator.store.num_partitions)
    cluster = StubCluster(
        {TOPIC: coordinator.store.num_partitions, topic: 1},
        set(range(coordinator.store.num_partitions)),
    )

    def attach():
        broker.broker.cluster = cluster

    def detach():
        broker.broker.cluster = None

    on_loop(broker, attach)
    try:
        with RawClient(broker.bootstrap) as c, RawClient(broker.bootstrap) as waiter:
            part = nested(8, 8, "OffsetCommitRequestPartition", partition_index=0,
                          committed_offset=42, committed_leader_epoch=-1, committed_metadata="")
            commit_req = req(8, 8, group_id=group, generation_id_or_member_epoch=-1,
                             member_id="", group_instance_id=None, topics=(
                                 nested(8, 8, "OffsetCommitRequestTopic", name=topic,
                                        partitions=(part,)),))
            r = c.request(commit_req)
            assert [code(p.error_code) for t in r.topics for p in t.partitions] == [NONE]

            first = c.request(join_req(group))
            assert code(first.error_code) == NONE
            # A second member's JoinGroup waits for the first to rejoin.
            with ThreadPoolExecutor(1) as pool:
                held = pool.submit(waiter.request, join_req(group))
                time.sleep(0.3)
                assert not held.done()
                on_loop(broker, lambda: coordinator.unload_partition(partition))
                assert code(held.result(5).error_code) == NOT_COORDINATOR

            fetch_topic = nested(9, 1, "OffsetFetchRequestTopic", name=topic,
                                 partition_indexes=(0,))
            v1 = c.request(req(9, 1, group_id=group, topics=(fetch_topic,)))
            assert [(code(p.error_code), p.committed_offset) for t in v1.topics
                    for p in t.partitions] == [(NOT_COORDINATOR, -1)]
            v5 = c.request(req(9, 5, group_id=group, topics=None))
            assert (code(v5.error_code), v5.topics) == (NOT_COORDINATOR, ())
            g8 = nested(9, 8, "OffsetFetchRequestGroup", group_id=group, topics=None)
            v8 = c.request(req(9, 8, groups=(g8,), require_stable=False))
            assert code(v8.groups[0].error_code) == NOT_COORDINATOR
            r = c.request(commit_req)
            assert [code(p.error_code) for t in r.topics for p in t.partitions] == [
                NOT_COORDINATOR
            ]
            described = c.request(req(15, 5, groups=(group,),
                                      include_authorized_operations=False))
            assert (code(described.groups[0].error_code), described.groups[0].group_state) == (
                NOT_COORDINATOR, ""
            )
            listed = c.request(req(16, 4, states_filter=()))
            assert code(listed.error_code) == NONE
            assert group not in {g.group_id for g in listed.groups}
            beat = c.request(req(12, 3, group_id=group, generation_id=1,
                                 member_id=first.member_id, group_instance_id=None))
            assert code(beat.error_code) == NOT_COORDINATOR
            synced = c.request(req(14, 3, group_id=group, generation_id=1,
                                   member_id=first.member_id, group_instance_id=None,
                                   assignments=()))
            assert code(synced.error_code) == NOT_COORDINATOR
            member = nested(13, 3, "MemberIdentity", member_id=first.member_id,
                            group_instance_id=None)
            left = c.request(req(13, 3, group_id=group, members=(member,)))
            assert code(left.error_code) == NOT_COORDINATOR
            od = c.request(req(47, 0, group_id=group, topics=()))
            assert code(od.error_code) == NOT_COORDINATOR
            deleted = c.request(req(42, 2, groups_names=(group,)))
            assert code(deleted.results[0].error_code) == NOT_COORDINATOR

            on_loop(broker, lambda: coordinator.load_partition(partition))
            v5 = c.request(req(9, 5, group_id=group, topics=None))
            assert code(v5.error_code) == NONE
            assert [(p.partition_index, p.committed_offset) for t in v5.topics
                    for p in t.partitions] == [(0, 42)]
    finally:
        on_loop(broker, detach)


def test_single_node_serves_every_group_without_a_cluster(broker):
    coordinator = broker.broker.coordinator
    groups = [f"g-{i}" for i in range(200)]
    assert {partition_for(g, coordinator.store.num_partitions) for g in groups} == set(
        range(coordinator.store.num_partitions)
    )
    assert all(coordinator.coordinator_error(g) is None for g in groups)
    assert coordinator.listing_error() == NONE
