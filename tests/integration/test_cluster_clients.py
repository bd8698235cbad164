"""Real clients against a three-broker cluster: each bootstraps from ONE broker, writes
keyed records to a 12-partition topic whose partitions are spread over all three, and
reads everything back (through another broker) with the order of each key kept.
A consumer group of three commits and resumes while its coordinator leads only some
of the partitions its members read."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic as KNewTopic

from .cluster_support import Cluster, offsets_partition, wait_until
from .helpers import (
    Got,
    Sent,
    assert_round_trip,
    confluent_produce,
    confluent_read,
    create_topic,
    normalize_headers,
    sample_records,
    topic_name,
)
from .java_support import needs_java
from .test_client_java import consume as java_consume
from .test_client_java import java_classpath  # noqa: F401 - the fixture
from .test_client_java import produce as java_produce

PARTITIONS = 12
TIMEOUT_MS = 30_000



def keyed_records(n: int, seed: int, keys: int = 36) -> list[Sent]:
    """The usual sample, over enough keys that every partition of 12 likely gets some."""
    return [
        Sent(f"key-{i % keys}".encode(), s.value, s.headers, s.timestamp)
        for i, s in enumerate(sample_records(n, seed=seed))
    ]


def assert_spread(cluster: Cluster, topic: str, got: list[Got], via: int) -> None:
    """Each broker leads a third of the partitions, ZooKeeper agrees with Metadata, and a
    partition's records are on its leader's disk only."""
    leaders = cluster.leaders(topic, via)
    assert Counter(leaders.values()) == {i: PARTITIONS // 3 for i in cluster.ids}, leaders
    assignment = cluster.assignment(topic)
    for p, leader in leaders.items():
        assert assignment[p] == [leader]
        state = cluster.partition_state(topic, p)
        assert (state["leader"], state["isr"]) == (leader, [leader])
    for p in {g.partition for g in got}:
        holders = [i for i in cluster.ids if cluster.partition_dir(i, topic, p).is_dir()]
        assert holders == [leaders[p]], f"partition {p} stored on {holders}"


def _pos(g: Got) -> tuple[int, int]:
    return (g.partition, g.offset)


def test_confluent_keyed_round_trip_over_three_brokers(cluster3):
    cluster = cluster3
    topic = topic_name("cf")
    create_topic(cluster.broker(1).bootstrap, topic, PARTITIONS)
    cluster.wait_topic(topic, PARTITIONS)
    sent = keyed_records(600, seed=91)
    delivered = confluent_produce(
        cluster.broker(1).bootstrap, topic, sent, acks="all", **{"compression.type": "lz4"}
    )
    got = confluent_read(cluster.broker(2).bootstrap, topic, PARTITIONS, len(sent))
    assert_round_trip(sent, got, partitions=PARTITIONS)
    assert {(m.partition(), m.offset()) for m in delivered} == {_pos(g) for g in got}
    assert len({g.partition for g in got}) == PARTITIONS
    assert_spread(cluster, topic, got, via=3)


def test_kafka_python_keyed_round_trip_over_three_brokers(cluster3):
    cluster = cluster3
    topic = topic_name("kp")
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.broker(2).bootstrap, request_timeout_ms=TIMEOUT_MS
    )
    try:
        response = admin.create_topics(
            [KNewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
            timeout_ms=TIMEOUT_MS,
        )
        assert [t["error_code"] for t in response["topics"]] == [0], response
    finally:
        admin.close()
    cluster.wait_topic(topic, PARTITIONS)
    sent = keyed_records(600, seed=92)
    producer = KafkaProducer(
        bootstrap_servers=cluster.broker(2).bootstrap,
        linger_ms=20,
        acks="all",
        request_timeout_ms=TIMEOUT_MS,
    )
    try:
        futures = [
            producer.send(
                topic, key=r.key, value=r.value, headers=list(r.headers), timestamp_ms=r.timestamp
            )
            for r in sent
        ]
        producer.flush(60)
        metadata = [f.get(timeout=60) for f in futures]
    finally:
        producer.close(timeout=10)

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.broker(3).bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=200,
        request_timeout_ms=TIMEOUT_MS + 5000,
    )
    got: list[Got] = []
    try:
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [
                    Got(r.partition, r.offset, r.key, r.value, normalize_headers(r.headers),
                        r.timestamp)
                    for r in records
                ]
    finally:
        consumer.close()
    assert_round_trip(sent, got, partitions=PARTITIONS)
    assert {(m.partition, m.offset) for m in metadata} == {_pos(g) for g in got}
    assert_spread(cluster, topic, got, via=1)


@needs_java
def test_java_keyed_round_trip_over_three_brokers(cluster3, java_classpath):  # noqa: F811
    """Java's producer is idempotent with acks=all by default: it needs a producer id
    from the cluster and writes to three leaders."""
    cluster = cluster3
    topic = topic_name("java")
    sent = keyed_records(450, seed=93)
    # The Java program creates the topic itself (Admin.createTopics through broker 3).
    offsets = java_produce(
        java_classpath, cluster.broker(3).bootstrap, topic, PARTITIONS, sent,
        "compression.type=zstd",
    )
    got = java_consume(java_classpath, cluster.broker(1).bootstrap, topic, PARTITIONS, len(sent))
    assert_round_trip(sent, got, partitions=PARTITIONS)
    assert set(offsets) == {_pos(g) for g in got}
    assert_spread(cluster, topic, got, via=2)
    # What librdkafka reads through yet another broker is the same.
    again = confluent_read(cluster.broker(2).bootstrap, topic, PARTITIONS, len(sent))
    assert sorted(again, key=_pos) == sorted(got, key=_pos)


# --- a consumer group spread over the cluster --------------------------------------------


def group_member(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )


def coordinator_of(cluster: Cluster, group: str) -> int:
    """FindCoordinator's answer, once the cluster has a leader for the group's partition."""
    from .helpers import RawClient, req

    def ask() -> int:
        with RawClient(cluster.broker(1).bootstrap) as raw:
            r = raw.request(req(10, 3, key=group, key_type=0))
        return int(r.node_id) if int(r.error_code) == 0 else 0

    return wait_until(ask, f"a coordinator for {group}")


def consume_exactly(members: list[Consumer], expected: int, settle: float = 1.5) -> list:
    """Poll every member until `expected` records arrived, then a little longer to see
    that no more come."""
    got: list = []
    deadline = time.monotonic() + 60
    quiet_until = None
    while time.monotonic() < deadline:
        for c in members:
            for msg in c.consume(num_messages=500, timeout=0.1):
                assert msg.error() is None, msg.error()
                got.append(msg)
        if len(got) >= expected:
            quiet_until = quiet_until or time.monotonic() + settle
            if time.monotonic() > quiet_until:
                break
    return got


def wait_for_cover(members: list[Consumer]) -> None:
    def covered() -> bool:
        for c in members:
            c.poll(0.05)
        sets = [{tp.partition for tp in c.assignment()} for c in members]
        return (
            all(sets)
            and set().union(*sets) == set(range(PARTITIONS))
            and sum(map(len, sets)) == PARTITIONS
        )

    wait_until(covered, "three members covering 12 partitions", timeout=60)


def test_group_of_three_commits_and_resumes_across_brokers(cluster3):
    cluster = cluster3
    topic, group = topic_name("grp"), topic_name("g")
    create_topic(cluster.broker(1).bootstrap, topic, PARTITIONS)
    cluster.wait_topic(topic, PARTITIONS)

    coordinator = coordinator_of(cluster, group)
    # Kafka's rule: the leader of the group's __consumer_offsets partition.
    offsets_leaders = cluster.leaders("__consumer_offsets", via=2)
    assert coordinator == offsets_leaders[offsets_partition(group, len(offsets_leaders))]
    leaders = cluster.leaders(topic, via=1)
    elsewhere = {p for p, leader in leaders.items() if leader != coordinator}
    assert len(elsewhere) == 2 * PARTITIONS // 3

    # One member per broker as its bootstrap.
    members = [group_member(cluster.broker(i).bootstrap, group) for i in cluster.ids]
    try:
        for c in members:
            c.subscribe([topic])
        wait_for_cover(members)
        first = keyed_records(360, seed=94)
        confluent_produce(cluster.broker(2).bootstrap, topic, first)
        got = consume_exactly(members, len(first))
        assert sorted(m.value() for m in got) == sorted(s.value for s in first)
        for c in members:
            c.commit(asynchronous=False)
    finally:
        for c in members:
            c.close()

    # The committed offsets, asked through a broker that is not the coordinator.
    ends = Counter(m.partition() for m in got)
    other = next(i for i in cluster.ids if i != coordinator)
    future = cluster.admin(other).list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in ends])]
    )[group]
    committed = {tp.partition: tp.offset for tp in future.result(timeout=30).topic_partitions}
    assert committed == dict(ends)

    # A new generation resumes where the last one committed: only the new records.
    second = keyed_records(120, seed=95)
    second = [Sent(s.key, b"second:" + s.value, s.headers, s.timestamp) for s in second]
    confluent_produce(cluster.broker(3).bootstrap, topic, second)
    members = [group_member(cluster.broker(i).bootstrap, group) for i in reversed(cluster.ids)]
    try:
        for c in members:
            c.subscribe([topic])
        resumed = consume_exactly(members, len(second))
    finally:
        for c in members:
            c.close()
    assert sorted(m.value() for m in resumed) == sorted(s.value for s in second)
