"""Metadata keeps each topic's encoded entry until the topic changes
(chronik.broker.metadata_cache): on a three-broker cluster, an entry kept across a
change would show the old leader, ISR, replicas or partition count for good.

Each test asks every broker for Metadata first (every topic, and the topic by name), so
that their entries are kept, then makes one kind of change: partitions added, a
preferred leader elected, replicas reassigned, a broker killed and started again, a
topic deleted and created again. Right after, every broker must answer what ZooKeeper
holds: confluent-kafka's list_topics, and a raw v12 request to each broker (for the
leader epoch and the offline replicas, which confluent-kafka does not show).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from chronik.protocol import errors
from chronik.protocol.compat import ZERO_UUID

from .cluster_support import Cluster, wait_until
from .helpers import RawClient, code, nested, req
from .helpers import topic_name as unique_topic

pytestmark = pytest.mark.slow

# The brokers learn a change from ZooKeeper's watches: a little later than ZooKeeper.
AGREE_TIMEOUT = 30.0

# partition -> (leader, leader epoch, replicas, isr, offline replicas)
Partitions = dict[int, tuple[int, int, list[int], list[int], list[int]]]


def from_zookeeper(cluster: Cluster, topic: str) -> Partitions:
    live = cluster.live_ids()
    out: Partitions = {}
    for p, replicas in cluster.assignment(topic).items():
        state = cluster.partition_state(topic, p)
        leader = state["leader"] if state["leader"] in live else -1
        offline = [r for r in replicas if r not in live]
        out[p] = (leader, state["leader_epoch"], replicas, list(state["isr"]), offline)
    return out


def raw_metadata(bootstrap: str, topic: str, every_topic: bool) -> Partitions:
    wanted = nested(3, 12, "MetadataRequestTopic", name=topic, topic_id=ZERO_UUID)
    topics = None if every_topic else (wanted,)
    with RawClient(bootstrap) as raw:
        response = raw.request(
            req(3, 12, topics=topics, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)
        )
    (t,) = [t for t in response.topics if t.name == topic]
    assert code(t.error_code) == errors.NONE
    out: Partitions = {}
    for p in t.partitions:
        expected_code = errors.NONE if p.leader_id >= 0 else errors.LEADER_NOT_AVAILABLE
        assert code(p.error_code) == expected_code
        out[p.partition_index] = (p.leader_id, p.leader_epoch, list(p.replica_nodes),
                                  list(p.isr_nodes), list(p.offline_replicas))
    return out


def confluent_metadata(cluster: Cluster, via: int, topic: str, every_topic: bool) -> Any:
    admin = cluster.admin(via)
    md = admin.list_topics(timeout=10) if every_topic else admin.list_topics(topic, timeout=10)
    t = md.topics[topic]
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in t.partitions.items()}


def warm(cluster: Cluster, topic: str) -> None:
    """Every running broker keeps the topic's entries (every topic, and by name)."""
    for i in cluster.running():
        for every_topic in (True, False):
            raw_metadata(cluster.broker(i).bootstrap, topic, every_topic)
            confluent_metadata(cluster, i, topic, every_topic)


def agree(cluster: Cluster, topic: str) -> Partitions:
    """Wait until every running broker answers what ZooKeeper holds; returns it."""
    seen: dict[str, Any] = {}

    def agreeing() -> Partitions | None:
        expected = from_zookeeper(cluster, topic)
        short = {p: (v[0], v[2], v[3]) for p, v in expected.items()}
        for i in cluster.running():
            for every_topic in (True, False):
                got = raw_metadata(cluster.broker(i).bootstrap, topic, every_topic)
                seen[f"raw {i} {every_topic}"] = got
                if got != expected:
                    seen["zookeeper"] = expected
                    return None
                client = confluent_metadata(cluster, i, topic, every_topic)
                seen[f"confluent {i} {every_topic}"] = client
                if client != short:
                    seen["zookeeper"] = expected
                    return None
        return expected

    try:
        return wait_until(agreeing, f"every broker's Metadata of {topic} as ZooKeeper's",
                          timeout=AGREE_TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen}") from None


def create(cluster: Cluster, topic: str, partitions: int, replication: int = 3) -> None:
    futures = cluster.admin(1).create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication)],
        operation_timeout=30, request_timeout=30,
    )
    futures[topic].result(timeout=60)
    cluster.wait_topic(topic, partitions)


def reassign(cluster: Cluster, topic: str, targets: dict[int, list[int]]) -> None:
    """AlterPartitionReassignments v0 to the controller (confluent-kafka has no call)."""
    partitions = tuple(
        nested(45, 0, "ReassignablePartition", partition_index=p, replicas=tuple(r))
        for p, r in targets.items()
    )
    with RawClient(cluster.broker(cluster.controller_id()).bootstrap) as raw:
        response = raw.request(req(
            45, 0, topics=(nested(45, 0, "ReassignableTopic", name=topic, partitions=partitions),)
        ))
    assert code(response.error_code) == errors.NONE
    assert {code(p.error_code) for t in response.responses for p in t.partitions} == {errors.NONE}


def full_isr(cluster: Cluster, topic: str) -> None:
    def full() -> bool:
        return all(sorted(v[3]) == sorted(v[2]) for v in from_zookeeper(cluster, topic).values())

    wait_until(full, f"{topic}'s ISRs full")


def test_added_partitions_show_at_once(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique_topic("md-grow")
    create(cluster, topic, 3)
    warm(cluster, topic)
    futures = cluster.admin(2).create_partitions([NewPartitions(topic, 7)], request_timeout=30)
    futures[topic].result(timeout=60)
    assert len(agree(cluster, topic)) == 7


def test_a_preferred_leader_election_shows_the_new_leader(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique_topic("md-elect")
    create(cluster, topic, 2)
    full_isr(cluster, topic)
    before = agree(cluster, topic)
    # The same replicas in another order: nothing to copy, and the first one (the
    # preferred leader) is not the leader until an election.
    rotated = {p: v[2][1:] + v[2][:1] for p, v in before.items()}
    reassign(cluster, topic, rotated)
    wait_until(lambda: cluster.assignment(topic) == rotated, "the replicas rotated")
    full_isr(cluster, topic)
    warm(cluster, topic)
    agree(cluster, topic)
    result = cluster.admin(3).elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic, p) for p in rotated]
    ).result(timeout=60)
    assert all(err is None or err.code() == KafkaError.ELECTION_NOT_NEEDED
               for err in result.values()), result
    after = agree(cluster, topic)
    for p, replicas in rotated.items():
        assert after[p][0] == replicas[0]
        if before[p][0] != replicas[0]:
            assert after[p][1] > before[p][1]  # a new leader epoch


def test_a_reassignment_shows_the_new_replicas(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique_topic("md-move")
    create(cluster, topic, 2, replication=2)
    full_isr(cluster, topic)
    before = agree(cluster, topic)
    warm(cluster, topic)
    targets = {p: sorted(set(cluster.ids) - set(v[2]))[:1] + v[2][:1] for p, v in before.items()}
    reassign(cluster, topic, targets)
    wait_until(lambda: cluster.assignment(topic) == targets, "the reassignment done", 90)
    full_isr(cluster, topic)
    after = agree(cluster, topic)
    assert {p: v[2] for p, v in after.items()} == targets


def test_a_topic_deleted_and_created_again_shows_the_new_one(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique_topic("md-again")
    create(cluster, topic, 4)
    warm(cluster, topic)
    first_id = cluster.get_json(f"/brokers/topics/{topic}")["topic_id"]
    cluster.admin(1).delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    wait_until(lambda: all(topic not in cluster.admin(i).list_topics(timeout=10).topics
                           for i in cluster.running()), f"{topic} gone from every broker")

    def created() -> bool:
        try:
            create(cluster, topic, 2, replication=2)
        except KafkaException as exc:  # the old one's deletion still finishing
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            return False
        return True

    wait_until(created, f"{topic} created again")
    assert cluster.get_json(f"/brokers/topics/{topic}")["topic_id"] != first_id
    after = agree(cluster, topic)
    assert len(after) == 2 and all(len(v[2]) == 2 for v in after.values())


def test_a_dead_broker_and_its_return_show_at_once(cluster3: Cluster) -> None:
    """kill -9: its partitions get other leaders (or none, for a replica of its own),
    it leaves the ISRs and its replicas are offline; started again, it is back in the
    ISRs. Last in the module: it kills a broker."""
    cluster = cluster3
    topic = unique_topic("md-death")
    alone = unique_topic("md-alone")
    create(cluster, topic, 3)
    futures = cluster.admin(1).create_topics(
        [NewTopic(alone, num_partitions=1, replica_assignment=[[3]])], operation_timeout=30
    )
    futures[alone].result(timeout=60)
    cluster.wait_topic(alone, 1)
    full_isr(cluster, topic)
    for name in (topic, alone):
        warm(cluster, name)
        agree(cluster, name)
    cluster.kill(3)
    try:
        wait_until(lambda: 3 not in cluster.live_ids(), "broker 3's session expired")
        wait_until(lambda: all(3 not in v[3] for v in from_zookeeper(cluster, topic).values()),
                   "broker 3 out of every ISR")
        dead = agree(cluster, topic)
        assert all(v[0] in (1, 2) and v[4] == [3] for v in dead.values()), dead
        (lost,) = agree(cluster, alone).values()
        assert lost[0] == -1 and lost[4] == [3]
    finally:
        cluster.start(3)
    full_isr(cluster, topic)
    back = agree(cluster, topic)
    assert all(sorted(v[3]) == [1, 2, 3] and v[4] == [] for v in back.values()), back
    (found,) = agree(cluster, alone).values()
    assert found[0] == 3 and found[4] == []
