"""The partition side of transactions, driven over a raw socket: transactional batches,
WriteTxnMarkers, the last stable offset, and what read_committed and read_uncommitted
consumers (confluent-kafka) see, before and after a restart."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from kio.schema.list_offsets.v4 import request as list_offsets
from kio.schema.write_txn_markers.v1 import request as markers

from chronik.records.builder import Record, build_batch

from .helpers import BASE_TS, RawClient, create_topic, topic_name
from .test_idempotence import init_producer, send

NONE = 0
INVALID_PRODUCER_EPOCH = 47


def txn_batch(pid: int, seq: int, values: list[bytes]) -> bytes:
    records = [Record(BASE_TS + i, b"k", v) for i, v in enumerate(values)]
    return build_batch(
        records, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
    )


def write_marker(raw: RawClient, topic: str, pid: int, commit: bool, epoch: int = 0) -> int:
    request = markers.WriteTxnMarkersRequest(
        markers=(
            markers.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=(markers.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),),
                coordinator_epoch=0,
            ),
        )
    )
    response = raw.request(request)
    (result,) = response.markers
    (part,) = result.topics[0].partitions
    return int(part.error_code)


def latest(raw: RawClient, topic: str, isolation: int) -> int:
    request = list_offsets.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=(
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=(list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1),),
            ),
        ),
    )
    (part,) = raw.request(request).topics[0].partitions
    return int(part.offset)


def consume(
    bootstrap: str, topic: str, isolation: str, expected_end: int, polls: int = 100
) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads from offset 0 until its position
    reaches ``expected_end`` (control records are skipped by the client)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(polls):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= expected_end:
                break
        return out
    finally:
        consumer.close()


def test_read_committed_sees_committed_transactions_only(broker_process):
    broker = broker_process
    topic = topic_name("txn")
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as raw:
        committer, _ = init_producer(raw)
        aborter, _ = init_producer(raw)
        assert send(raw, topic, txn_batch(committer, 0, [b"c1", b"c2"]))[0] == NONE  # 0-1
        assert send(raw, topic, txn_batch(aborter, 0, [b"a1"]))[0] == NONE  # 2
        # Both open: the LSO is the first transaction's first offset.
        assert latest(raw, topic, isolation=1) == 0
        assert latest(raw, topic, isolation=0) == 3
        assert write_marker(raw, topic, committer, commit=True) == NONE  # 3
        assert latest(raw, topic, isolation=1) == 2  # the aborter's is still open
        assert write_marker(raw, topic, aborter, commit=False) == NONE  # 4
        assert latest(raw, topic, isolation=1) == latest(raw, topic, isolation=0) == 5
    committed = consume(broker.bootstrap, topic, "read_committed", 5)
    everything = consume(broker.bootstrap, topic, "read_uncommitted", 5)
    assert committed == [b"c1", b"c2"]
    assert everything == [b"c1", b"c2", b"a1"]
    broker.kill()
    broker.start()
    assert consume(broker.bootstrap, topic, "read_committed", 5) == [b"c1", b"c2"]


def test_an_open_transaction_holds_read_committed_back_until_its_marker(broker):
    topic = topic_name("txn-open")
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as raw:
        pid, _ = init_producer(raw)
        plain, _ = init_producer(raw)
        assert send(raw, topic, txn_batch(pid, 0, [b"pending"]))[0] == NONE  # 0
        plain_batch = build_batch(
            [Record(BASE_TS, b"k", b"plain")],
            producer_id=plain,
            producer_epoch=0,
            base_sequence=0,
        )
        assert send(raw, topic, plain_batch)[0] == NONE  # 1
        assert consume(broker.bootstrap, topic, "read_committed", 1, polls=8) == []
        assert consume(broker.bootstrap, topic, "read_uncommitted", 2) == [b"pending", b"plain"]
        assert write_marker(raw, topic, pid, commit=False) == NONE  # 2
        # Fenced: the producer's next epoch aborted it; an older marker is refused.
        assert write_marker(raw, topic, pid, commit=True, epoch=-1) == INVALID_PRODUCER_EPOCH
    assert consume(broker.bootstrap, topic, "read_committed", 3) == [b"plain"]


def test_markers_for_unknown_partitions_answer_per_partition(broker):
    with RawClient(broker.bootstrap) as raw:
        assert write_marker(raw, "no-such-topic", 5, commit=True) == 3  # UNKNOWN_TOPIC_OR_PART.
