"""ElectLeaders and OffsetForLeaderEpoch on a three-broker cluster.

With one replica per partition every leader is its preferred replica; the controller
answers ELECTION_NOT_NEEDED and the other brokers NOT_CONTROLLER. With three replicas a
failover leaves a partition led by a replica that is not its preferred one: once that
broker is back in the ISR, `chronik cluster elect-leaders` gives the partition back to
it under a new leader epoch, and OffsetForLeaderEpoch fences a caller on the old epoch.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from chronik.protocol import errors

from .cli_support import chronik
from .cluster_support import Cluster, wait_until
from .helpers import RawClient, code, confluent_produce, create_topic, nested, req, sample_records
from .helpers import topic_name as unique_topic

pytestmark = pytest.mark.slow


def raw_metadata(bootstrap: str, topic: str) -> Any:
    with RawClient(bootstrap) as raw:
        response = raw.request(
            req(
                3,
                9,
                topics=(nested(3, 9, "MetadataRequestTopic", name=topic),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    (t,) = response.topics
    return {p.partition_index: p for p in t.partitions}


def elect_raw(bootstrap: str, topic: str, partitions: tuple[int, ...]) -> dict[int, int]:
    with RawClient(bootstrap) as raw:
        response = raw.request(
            req(
                43,
                2,
                election_type=0,
                topic_partitions=(
                    nested(43, 2, "TopicPartitions", topic=topic, partitions=partitions),
                ),
                timeout=10_000,
            )
        )
    assert code(response.error_code) == errors.NONE
    return {
        p.partition_id: code(p.error_code)
        for r in response.replica_election_results
        for p in r.partition_result
    }


def epoch_end(bootstrap: str, topic: str, partition: int, current: int, epoch: int) -> Any:
    with RawClient(bootstrap) as raw:
        response = raw.request(
            req(
                23,
                4,
                replica_id=-1,
                topics=(
                    nested(
                        23,
                        4,
                        "OffsetForLeaderTopic",
                        topic=topic,
                        partitions=(
                            nested(
                                23,
                                4,
                                "OffsetForLeaderPartition",
                                partition=partition,
                                current_leader_epoch=current,
                                leader_epoch=epoch,
                            ),
                        ),
                    ),
                ),
            )
        )
    return response.topics[0].partitions[0]


def test_unreplicated_partitions_need_no_election(cluster3: Cluster) -> None:
    cluster = cluster3
    topic = unique_topic("elect1")
    create_topic(cluster.broker(1).bootstrap, topic, 3)
    cluster.wait_topic(topic, 3)
    controller = cluster.controller_id()
    other = next(i for i in cluster.ids if i != controller)
    assert elect_raw(cluster.broker(controller).bootstrap, topic, (0, 1, 2, 9)) == {
        0: errors.ELECTION_NOT_NEEDED,
        1: errors.ELECTION_NOT_NEEDED,
        2: errors.ELECTION_NOT_NEEDED,
        9: errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert set(elect_raw(cluster.broker(other).bootstrap, topic, (0, 1)).values()) == {
        errors.NOT_CONTROLLER
    }
    # The admin client finds the controller itself.
    result = (
        cluster.admin(other)
        .elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
        .result(timeout=30)
    )
    assert [err.code() for err in result.values()] == [KafkaError.ELECTION_NOT_NEEDED]

    leaders = cluster.leaders(topic, via=1)
    confluent_produce(cluster.bootstrap, topic, sample_records(30))
    epoch = raw_metadata(cluster.broker(1).bootstrap, topic)[0].leader_epoch
    leader = cluster.broker(leaders[0]).bootstrap
    answer = epoch_end(leader, topic, 0, epoch, epoch)
    assert code(answer.error_code) == errors.NONE and answer.leader_epoch == epoch
    assert answer.end_offset >= 0
    assert code(epoch_end(leader, topic, 0, epoch + 1, epoch).error_code) == (
        errors.UNKNOWN_LEADER_EPOCH
    )
    elsewhere = next(i for i in cluster.ids if i != leaders[0])
    assert code(
        epoch_end(cluster.broker(elsewhere).bootstrap, topic, 0, epoch, epoch).error_code
    ) == (errors.NOT_LEADER_OR_FOLLOWER)


def create_replicated(cluster: Cluster, topic: str, partitions: int) -> None:
    future = cluster.admin(1).create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=3)],
        operation_timeout=30,
        request_timeout=30,
    )[topic]
    try:
        future.result(timeout=60)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR:
            pytest.skip("these brokers do not replicate partitions yet (RF=3 refused)")
        raise


def test_preferred_leader_comes_back_after_a_failover(cluster_factory) -> None:
    # No automatic rebalance: only the election asked for moves the leader back.
    cluster = cluster_factory(3, {"auto.leader.rebalance.enable": "false"})
    topic = unique_topic("elect3")
    create_replicated(cluster, topic, 3)
    cluster.wait_topic(topic, 3)
    preferred = {p: replicas[0] for p, replicas in cluster.assignment(topic).items()}
    everyone = set(cluster.ids)

    def isr_full() -> bool:
        meta = raw_metadata(cluster.broker(1).bootstrap, topic)
        return all(set(p.isr_nodes) == everyone for p in meta.values())

    wait_until(isr_full, "every replica in the ISR")
    meta = raw_metadata(cluster.broker(1).bootstrap, topic)
    assert {p: list(m.replica_nodes) for p, m in meta.items()} == cluster.assignment(topic)
    assert all(list(m.offline_replicas) == [] for m in meta.values())
    delivered = confluent_produce(cluster.bootstrap, topic, sample_records(60), acks="all")
    in_partition_0 = sum(1 for m in delivered if m.partition() == 0)

    victim = preferred[0]
    survivor = next(i for i in cluster.ids if i != victim)
    old_epoch = meta[0].leader_epoch
    cluster.stop(victim)
    try:
        wait_until(
            lambda: cluster.leaders(topic, via=survivor)[0] not in (victim, -1),
            "partition 0 led by another replica",
        )
        meta = raw_metadata(cluster.broker(survivor).bootstrap, topic)
        assert victim in meta[0].offline_replicas
        assert victim not in meta[0].isr_nodes
    finally:
        cluster.start(victim)
    wait_until(isr_full, f"broker {victim} back in the ISR")
    assert cluster.leaders(topic, via=survivor)[0] != victim

    result = chronik(
        "cluster", "elect-leaders", "--topic", topic, bootstrap=cluster.broker(survivor).bootstrap
    )
    assert result.returncode == 0, result.stderr
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in (
        result.lines
    )
    wait_until(
        lambda: all(cluster.leaders(topic, via=i) == preferred for i in cluster.ids),
        "every partition led by its preferred replica",
    )
    new_epoch = raw_metadata(cluster.broker(victim).bootstrap, topic)[0].leader_epoch
    assert new_epoch > old_epoch
    leader = cluster.broker(victim).bootstrap
    fenced = epoch_end(leader, topic, 0, old_epoch, old_epoch)
    assert code(fenced.error_code) == errors.FENCED_LEADER_EPOCH
    current = epoch_end(leader, topic, 0, new_epoch, new_epoch)
    assert code(current.error_code) == errors.NONE
    assert (current.leader_epoch, current.end_offset) == (new_epoch, in_partition_0)
