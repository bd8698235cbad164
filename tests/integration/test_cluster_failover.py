"""Brokers of a three-broker cluster stopping, dying and coming back. Until replication
exists a partition has one replica: while its broker is down it has no leader (Metadata:
leader -1, LEADER_NOT_AVAILABLE, the broker in offline_replicas), clients wait and
retry, and when the broker returns it serves the partition from its disk with nothing
acknowledged lost. A killed controller is replaced within the ZooKeeper session timeout.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from .cluster_support import Cluster, wait_until
from .helpers import (
    RawClient,
    Sent,
    assert_round_trip,
    confluent_produce,
    confluent_read,
    create_topic,
    nested,
    req,
    sample_records,
    topic_name,
)

PARTITIONS = 12
LEADER_NOT_AVAILABLE = 5

pytestmark = pytest.mark.slow


def keyed(n: int, seed: int, tag: str) -> list[Sent]:
    return [
        Sent(f"key-{i % 36}".encode(), f"{tag}:".encode() + s.value, s.headers, s.timestamp)
        for i, s in enumerate(sample_records(n, seed=seed))
    ]


def raw_partitions(cluster: Cluster, via: int, topic: str):
    with RawClient(cluster.broker(via).bootstrap) as raw:
        r = raw.request(
            req(
                3, 9,
                topics=(nested(3, 9, "MetadataRequestTopic", name=topic),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    brokers = {int(b.node_id) for b in r.brokers}
    return brokers, {p.partition_index: p for p in r.topics[0].partitions}


def assert_offline(cluster: Cluster, down: int, topic: str, owned: set[int]) -> None:
    """What the live brokers and ZooKeeper say about `down`'s partitions while it is away."""
    up = [i for i in cluster.ids if i != down]
    wait_until(lambda: down not in cluster.live_ids(), f"broker {down} deregistered")
    for i in up:

        def offline(i: int = i) -> bool:
            brokers, parts = raw_partitions(cluster, i, topic)
            return down not in brokers and all(
                parts[p].leader_id == -1 and int(parts[p].error_code) == LEADER_NOT_AVAILABLE
                for p in owned
            )

        wait_until(offline, f"broker {i} reporting broker {down}'s partitions offline")
        _, parts = raw_partitions(cluster, i, topic)
        for p, meta in parts.items():
            if p in owned:
                assert list(meta.offline_replicas) == [down]
                assert list(meta.replica_nodes) == [down]
            else:
                assert int(meta.error_code) == 0 and meta.leader_id in up
    # The controller records it in ZooKeeper: no leader, the ISR kept for the return.
    for p in owned:
        wait_until(
            lambda p=p: cluster.partition_state(topic, p)["leader"] == -1,
            f"partition {p}'s state without a leader",
        )
        assert cluster.partition_state(topic, p)["isr"] == [down]


def produce_in_background(bootstrap: str, topic: str, records: list[Sent]):
    """confluent-kafka producing while a broker is down: it must wait for a leader and retry."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["delivered"] = confluent_produce(
                bootstrap, topic, records, acks="all", **{"message.timeout.ms": 120_000}
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def restart_round(cluster: Cluster, victim: int, how: str, topic: str, sent: list[Sent],
                  seed: int) -> list[Sent]:
    """Take `victim` down (SIGTERM or kill -9), check the cluster's view while it is down,
    produce through another broker meanwhile, bring it back, and read everything."""
    leaders = cluster.leaders(topic, via=1)
    owned = {p for p, leader in leaders.items() if leader == victim}
    assert owned
    before = cluster.controller_epoch()
    if how == "sigterm":
        assert cluster.stop(victim) == 0, cluster.log_text(victim)[-2000:]
    else:
        cluster.kill(victim)
    bootstrap = cluster.broker(victim % 3 + 1).bootstrap
    assert_offline(cluster, victim, topic, owned)

    more = keyed(240, seed, f"{how}-while-down")
    thread, outcome = produce_in_background(bootstrap, topic, more)
    thread.join(3)
    assert thread.is_alive(), f"producer finished with its partitions offline: {outcome}"

    cluster.start(victim)
    thread.join(120)
    assert not thread.is_alive() and "error" not in outcome, outcome
    cluster.wait_topic(topic, PARTITIONS)
    # The partitions came back to the same broker, from its disk.
    assert cluster.leaders(topic, via=victim) == leaders
    for p in owned:
        state = cluster.partition_state(topic, p)
        assert (state["leader"], state["isr"]) == (victim, [victim])
    assert cluster.controller_epoch() >= before

    everything = sent + more
    got = confluent_read(cluster.broker(victim).bootstrap, topic, PARTITIONS, len(everything))
    assert_round_trip(everything, got, PARTITIONS)
    return everything


def test_a_broker_stopped_then_killed_comes_back_with_its_data(cluster_factory):
    cluster = cluster_factory()
    topic = topic_name("fo")
    create_topic(cluster.broker(1).bootstrap, topic, PARTITIONS)
    cluster.wait_topic(topic, PARTITIONS)
    sent = keyed(480, 81, "before")
    confluent_produce(cluster.broker(1).bootstrap, topic, sent, acks="all")

    # A broker that is not the controller, so only its own partitions are affected.
    victim = next(i for i in cluster.ids if i != cluster.controller_id())
    sent = restart_round(cluster, victim, "sigterm", topic, sent, 82)
    sent = restart_round(cluster, victim, "kill", topic, sent, 83)


def test_the_controller_killed_another_takes_over(cluster_factory):
    cluster = cluster_factory()
    old = cluster.controller_id()
    epoch = cluster.controller_epoch()
    topic = topic_name("before")
    create_topic(cluster.broker(old).bootstrap, topic, 6)
    cluster.wait_topic(topic, 6)

    cluster.kill(old)
    survivors = [i for i in cluster.ids if i != old]
    new = wait_until(
        lambda: cluster.controller_id() if cluster.controller_id() in survivors else 0,
        "a surviving broker elected controller",
    )
    assert cluster.controller_epoch() > epoch
    wait_until(lambda: cluster.live_ids() == set(survivors), f"broker {old} deregistered")
    for i in survivors:
        md_controller = wait_until(
            lambda i=i: cluster.admin(i).list_topics(timeout=10).controller_id == new,
            f"broker {i} naming broker {new} as controller",
        )
        assert md_controller

    # Topic creation works again, through either survivor, on the live brokers only.
    after = topic_name("after")
    create_topic(cluster.broker(survivors[-1]).bootstrap, after, 6)
    cluster.wait_topic(after, 6)
    leaders = cluster.leaders(after, via=survivors[0])
    assert Counter(leaders.values()) == {i: 3 for i in survivors}
    sent = keyed(120, 84, "after")
    confluent_produce(cluster.broker(survivors[0]).bootstrap, after, sent, acks="all")
    got = confluent_read(cluster.broker(survivors[1]).bootstrap, after, 6, len(sent))
    assert_round_trip(sent, got, 6)

    # The old controller rejoins as an ordinary broker and leads its partitions again.
    cluster.start(old)
    assert cluster.controller_id() == new
    cluster.wait_topic(topic, 6)
    assert old in set(cluster.leaders(topic, via=new).values())


def test_the_group_coordinator_killed_offsets_survive(cluster_factory):
    from confluent_kafka import Consumer

    from .cluster_support import offsets_partition

    # One replica of each __consumer_offsets partition: the coordinator's loss leaves its
    # groups unavailable until it returns (replicated offsets fail over instead:
    # test_replication_faults).
    cluster = cluster_factory(config={"offsets.topic.replication.factor": "1"})
    topic = topic_name("grp")
    create_topic(cluster.broker(1).bootstrap, topic, 6)
    cluster.wait_topic(topic, 6)
    first = keyed(300, 85, "first")
    confluent_produce(cluster.broker(1).bootstrap, topic, first, acks="all")
    group = topic_name("g")

    def consume(expected: int) -> list[bytes]:
        consumer = Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        })
        consumer.subscribe([topic])
        values: list[bytes] = []

        def enough() -> bool:
            values.extend(m.value() for m in consumer.consume(100, 0.5) if not m.error())
            return len(values) >= expected

        try:
            wait_until(enough, f"{expected} records consumed")
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return values

    assert len(consume(len(first))) == len(first)
    wait_until(lambda: "__consumer_offsets" in cluster.admin(1).list_topics(timeout=10).topics,
               "__consumer_offsets created")
    coordinator = cluster.leaders("__consumer_offsets", via=1)[offsets_partition(group)]
    cluster.kill(coordinator)
    up = next(i for i in cluster.ids if i != coordinator)
    with RawClient(cluster.broker(up).bootstrap) as raw:
        def not_available() -> bool:
            r = raw.request(req(10, 3, key=group, key_type=0))
            return r.error_code == 15  # COORDINATOR_NOT_AVAILABLE while its broker is away
        wait_until(not_available, "FindCoordinator answering COORDINATOR_NOT_AVAILABLE")

    cluster.start(coordinator)
    cluster.wait_topic(topic, 6)
    second = keyed(60, 86, "second")
    confluent_produce(cluster.broker(up).bootstrap, topic, second, acks="all")
    # The committed offsets were loaded again by the returning coordinator: only the new
    # records are read.
    values = consume(len(second))
    assert sorted(values) == sorted(s.value for s in second)
