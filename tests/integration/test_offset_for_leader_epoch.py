"""OffsetForLeaderEpoch (API 23) on a single node: through the raw client at every
version, and through librdkafka, which asks it to validate a seek to an offset that
carries a leader epoch (KIP-320)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronik.protocol import errors
from chronik.protocol.compat import build, request_class

from .helpers import code, topic_name
from .rawclient import RawClient

API = 23


def _element(cls: type, name: str) -> type:
    """The class of the items of a list field (works for kio's and the legacy schemas)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    hint = typing.get_type_hints(cls)[field.name] if isinstance(field.type, str) else field.type
    return typing.get_args(hint)[0]


def offset_for_epoch(version: int, topic: str, partitions: list[tuple[int, int, int]]) -> Any:
    """A request for (partition, current_leader_epoch, leader_epoch) of one topic."""
    cls = request_class(API, version)
    topic_cls = _element(cls, "topics")
    part_cls = _element(topic_cls, "partitions")
    parts = tuple(
        build(part_cls, partition=p, current_leader_epoch=current, leader_epoch=epoch)
        for p, current, epoch in partitions
    )
    return build(cls, replica_id=-1, topics=(build(topic_cls, topic=topic, partitions=parts),))


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def test_answers_every_version_from_the_local_log(broker) -> None:
    topic = topic_name("ofle")
    produce(broker.bootstrap, topic, 7)
    with RawClient(broker.bootstrap) as raw:
        for version in range(5):
            response = raw.request(
                offset_for_epoch(version, topic, [(0, -1, 0), (0, -1, 3), (9, -1, 0)])
            )
            (result,) = response.topics
            assert result.topic == topic
            known, later, missing = result.partitions
            assert (code(known.error_code), known.end_offset) == (errors.NONE, 7)
            # An epoch this log never had: Kafka's UNDEFINED answer.
            assert (code(later.error_code), later.end_offset) == (errors.NONE, -1)
            assert code(missing.error_code) == errors.UNKNOWN_TOPIC_OR_PARTITION
            if version >= 1:
                assert (known.leader_epoch, later.leader_epoch) == (0, -1)


def test_fences_a_caller_whose_current_epoch_differs(broker) -> None:
    topic = topic_name("ofle")
    produce(broker.bootstrap, topic, 3)
    with RawClient(broker.bootstrap) as raw:
        response = raw.request(offset_for_epoch(4, topic, [(0, 0, 0), (0, 1, 0), (0, -2, 0)]))
    same, newer, older = response.topics[0].partitions
    assert (code(same.error_code), same.leader_epoch, same.end_offset) == (errors.NONE, 0, 3)
    assert code(newer.error_code) == errors.UNKNOWN_LEADER_EPOCH
    assert code(older.error_code) == errors.FENCED_LEADER_EPOCH
    assert (newer.leader_epoch, newer.end_offset) == (-1, -1)
    with RawClient(broker.bootstrap) as raw:
        unknown = raw.request(offset_for_epoch(4, topic_name("absent"), [(0, 0, 0)]))
    assert code(unknown.topics[0].partitions[0].error_code) == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_a_seek_with_a_leader_epoch_keeps_its_position(broker) -> None:
    """librdkafka validates a seek to a position that carries a leader epoch; an answer
    saying the epoch is unknown would reset the consumer by auto.offset.reset."""
    topic = topic_name("ofle")
    produce(broker.bootstrap, topic, 20)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic_name("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen = []
        while len(seen) < 20:
            msgs = consumer.consume(20, timeout=10)
            assert msgs, "no records from the beginning"
            seen.extend(msgs)
        epoch = seen[12].leader_epoch()
        assert epoch is not None and epoch >= 0, "records carry no leader epoch to validate"
        consumer.seek(TopicPartition(topic, 0, 12, leader_epoch=epoch))
        msgs = consumer.consume(5, timeout=10)
        assert msgs, "the seek was reset away from its offset"
        assert msgs[0].error() is None
        assert [m.offset() for m in msgs][:1] == [12]
    finally:
        consumer.close()
