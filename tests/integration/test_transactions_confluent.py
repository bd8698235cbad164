"""Transactions end to end with confluent-kafka (librdkafka): the coordinator, markers on
several partitions, read_committed against read_uncommitted, fencing, offsets sent in a
transaction, the timeout of an abandoned transaction and recovery after kill -9."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.offset_fetch.v7 import request as offset_fetch

from .helpers import RawClient, create_topic, topic_name, wait_until

UNSTABLE_OFFSET_COMMIT = 88
# Abandoned transactions are looked for every half second instead of every ten.
FAST_ABORT = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


def producer(bootstrap: str, txn_id: str, **config: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **config})
    p.init_transactions(20)
    return p


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, settle: float = 1.5
) -> list[bytes]:
    """Every value one consumer with ``isolation`` reads from the start of each
    partition, once nothing new has come for ``settle`` seconds."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic_name("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        quiet_since = time.monotonic()
        deadline = time.monotonic() + 20
        while time.monotonic() - quiet_since < settle and time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=500, timeout=0.2)
            for msg in msgs:
                assert msg.error() is None, msg.error()
                out.append(msg.value())
            if msgs:
                quiet_since = time.monotonic()
        return out
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of partition 0, as a read_uncommitted consumer (which
    does not require stable offsets) fetches it."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def fetch_stable(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(error code, offset) of partition 0 from OffsetFetch v7 with require_stable."""
    request = offset_fetch.OffsetFetchRequest(
        group_id=group,
        topics=(offset_fetch.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
        require_stable=True,
    )
    with RawClient(bootstrap) as raw:
        response = raw.request(request)
    (part,) = response.topics[0].partitions
    return int(part.error_code), int(part.committed_offset)


def group_metadata(bootstrap: str, group: str) -> Any:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def test_committed_and_aborted_transactions_over_two_partitions(broker):
    topic = topic_name("txn")
    create_topic(broker.bootstrap, topic, partitions=2)
    p = producer(broker.bootstrap, topic_name("tid"))
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"a%d" % i, partition=i % 2)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=1)
    p.commit_transaction(20)

    committed_values = sorted(read_all(broker.bootstrap, topic, 2, "read_committed"))
    everything = sorted(read_all(broker.bootstrap, topic, 2, "read_uncommitted"))
    assert committed_values == sorted([b"c%d" % i for i in range(6)] + [b"last"])
    assert everything == sorted(committed_values + [b"a%d" % i for i in range(4)])


def test_a_second_producer_with_the_same_id_fences_the_first(broker):
    topic = topic_name("fence")
    create_topic(broker.bootstrap, topic)
    txn_id = topic_name("tid")
    first = producer(broker.bootstrap, txn_id)
    first.begin_transaction()
    first.produce(topic, value=b"zombie-open")
    first.flush(10)
    # The new producer's InitProducerId aborts the first one's open transaction.
    second = producer(broker.bootstrap, txn_id)
    with pytest.raises(KafkaException) as raised:
        first.produce(topic, value=b"zombie")
        first.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or "fenced" in error.str().lower(), error
    second.begin_transaction()
    second.produce(topic, value=b"fresh")
    second.commit_transaction(20)
    assert read_all(broker.bootstrap, topic, 1, "read_committed") == [b"fresh"]
    assert b"zombie-open" in read_all(broker.bootstrap, topic, 1, "read_uncommitted")


def test_offsets_sent_in_a_transaction_count_only_once_it_commits(broker):
    source = topic_name("in")
    sink = topic_name("out")
    group = topic_name("g")
    create_topic(broker.bootstrap, source)
    create_topic(broker.bootstrap, sink)
    meta = group_metadata(broker.bootstrap, group)
    p = producer(broker.bootstrap, topic_name("tid"))

    p.begin_transaction()
    p.produce(sink, value=b"one")
    p.send_offsets_to_transaction([TopicPartition(source, 0, 5)], meta, 20)
    # Pending: a plain fetch sees nothing yet, a stable one is told to retry.
    assert committed(broker.bootstrap, group, source) < 0
    assert fetch_stable(broker.bootstrap, group, source)[0] == UNSTABLE_OFFSET_COMMIT
    p.commit_transaction(20)
    assert committed(broker.bootstrap, group, source) == 5
    assert fetch_stable(broker.bootstrap, group, source) == (0, 5)

    p.begin_transaction()
    p.produce(sink, value=b"two")
    p.send_offsets_to_transaction([TopicPartition(source, 0, 9)], meta, 20)
    p.abort_transaction(20)
    assert committed(broker.bootstrap, group, source) == 5
    assert fetch_stable(broker.bootstrap, group, source) == (0, 5)
    assert read_all(broker.bootstrap, sink, 1, "read_committed") == [b"one"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(broker_factory):
    broker = broker_factory(FAST_ABORT)
    topic = topic_name("abandoned")
    create_topic(broker.bootstrap, topic)
    abandoned = producer(broker.bootstrap, topic_name("tid"), **{"transaction.timeout.ms": 2000})
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"never")
    abandoned.flush(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"after")
    plain.flush(10)
    started = time.monotonic()
    # Held back by the open transaction, then released by the coordinator's abort.
    assert read_all(broker.bootstrap, topic, 1, "read_committed", settle=0.5) == []
    wait_until(
        lambda: read_all(broker.bootstrap, topic, 1, "read_committed", settle=0.3) == [b"after"],
        timeout=15,
        what="the abandoned transaction's abort",
    )
    assert time.monotonic() - started < 12
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(10)


def test_transactions_and_their_offsets_survive_kill_9(broker_process_factory):
    broker = broker_process_factory(FAST_ABORT)
    source = topic_name("in")
    sink = topic_name("out")
    group = topic_name("g")
    create_topic(broker.bootstrap, source)
    create_topic(broker.bootstrap, sink)
    meta = group_metadata(broker.bootstrap, group)
    txn_id = topic_name("tid")
    p = producer(broker.bootstrap, txn_id, **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(sink, value=b"kept")
    p.send_offsets_to_transaction([TopicPartition(source, 0, 3)], meta, 20)
    p.commit_transaction(20)
    p.begin_transaction()
    p.produce(sink, value=b"open")
    p.send_offsets_to_transaction([TopicPartition(source, 0, 7)], meta, 20)
    p.flush(10)

    broker.kill()
    broker.start()
    # The committed transaction and its offsets are back; the open one is still open
    # (the coordinator reloaded it) until its timeout aborts it.
    assert committed(broker.bootstrap, group, source) == 3
    wait_until(
        lambda: fetch_stable(broker.bootstrap, group, source) == (0, 3),
        timeout=20,
        what="the open transaction's offsets to resolve",
    )
    assert read_all(broker.bootstrap, sink, 1, "read_committed") == [b"kept"]
    assert sorted(read_all(broker.bootstrap, sink, 1, "read_uncommitted")) == [b"kept", b"open"]
    # A new producer of the same id starts cleanly after the abort.
    again = producer(broker.bootstrap, txn_id)
    again.begin_transaction()
    again.produce(sink, value=b"again")
    again.commit_transaction(20)
    assert read_all(broker.bootstrap, sink, 1, "read_committed") == [b"kept", b"again"]


def test_an_idle_producer_is_not_taken_for_one_in_a_transaction_after_a_restart(
    broker_process_factory,
):
    """A commit reserves its partitions for the producer's next transaction (an Ongoing
    record written with the completion); unused, the reservation is given back after a
    second. A broker restarted after that finds the id idle: its producer, idle past
    its transaction timeout meanwhile, is not aborted and fenced but commits again."""
    broker = broker_process_factory(FAST_ABORT)
    topic = topic_name("idle")
    create_topic(broker.bootstrap, topic)
    p = producer(broker.bootstrap, topic_name("tid"), **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(topic, value=b"first")
    p.commit_transaction(20)
    time.sleep(2.0)  # the reservation (1 s) given back
    broker.kill()
    broker.start()
    time.sleep(4.0)  # past the transaction timeout, looked for every half second
    p.begin_transaction()
    p.produce(topic, value=b"second")
    p.commit_transaction(30)
    assert read_all(broker.bootstrap, topic, 1, "read_committed") == [b"first", b"second"]


def test_an_idle_transactional_id_expires(broker_factory):
    from kio.schema.init_producer_id.v4 import request as init_v4

    broker = broker_factory(
        {
            "transactional.id.expiration.ms": "1000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
        }
    )
    txn_id = topic_name("tid")

    def init() -> tuple[int, int]:
        request = init_v4.InitProducerIdRequest(
            transactional_id=txn_id,
            transaction_timeout=datetime.timedelta(seconds=10),
            producer_id=-1,
            producer_epoch=-1,
        )
        with RawClient(broker.bootstrap) as raw:
            response = raw.request(request)
        assert int(response.error_code) == 0, response
        return int(response.producer_id), int(response.producer_epoch)

    pid, epoch = init()
    assert init() == (pid, epoch + 1)  # the id is known: same producer, next epoch
    time.sleep(2.5)
    new_pid, new_epoch = init()
    assert new_pid != pid and new_epoch == 0
