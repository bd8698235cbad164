"""ElectLeaders (API 43) on a single node: a cluster of one, where every partition already
has its preferred, live leader."""

from __future__ import annotations

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from chronik.protocol import errors

from .helpers import code, create_topic, nested, req, topic_name
from .rawclient import RawClient


def test_confluent_admin_elect_leaders_on_one_node(broker) -> None:
    topic = topic_name("elect")
    create_topic(broker.bootstrap, topic, partitions=2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 7)]
    for kind in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(kind, wanted).result(timeout=30)
        got = {(tp.topic, tp.partition): err.code() for tp, err in result.items()}
        assert got == {
            (topic, 0): KafkaError.ELECTION_NOT_NEEDED,
            (topic, 1): KafkaError.ELECTION_NOT_NEEDED,
            (topic, 7): KafkaError.UNKNOWN_TOPIC_OR_PART,
        }
    # Every partition: those that needed no election are left out of the answer.
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30) == {}


def test_raw_versions_and_a_bad_election_type(broker) -> None:
    topic = topic_name("elect")
    create_topic(broker.bootstrap, topic, partitions=1)
    with RawClient(broker.bootstrap) as raw:
        v0 = raw.request(
            req(
                43,
                0,
                topic_partitions=(nested(43, 0, "TopicPartitions", topic=topic, partitions=(0,)),),
                timeout=1000,
            )
        )
        ((result,),) = [r.partition_result for r in v0.replica_election_results]
        assert code(result.error_code) == errors.ELECTION_NOT_NEEDED
        bad = raw.request(
            req(
                43,
                2,
                election_type=7,
                topic_partitions=(nested(43, 2, "TopicPartitions", topic=topic, partitions=(0,)),),
                timeout=1000,
            )
        )
        assert code(bad.error_code) == errors.INVALID_REQUEST
        (part,) = bad.replica_election_results[0].partition_result
        assert code(part.error_code) == errors.INVALID_REQUEST
