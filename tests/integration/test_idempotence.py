"""Idempotent produce, driven over a raw socket so a test controls exactly which
batch is sent (a retry of the same bytes, a sequence gap, an older epoch)."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.init_producer_id import v0 as init_v0
from kio.schema.init_producer_id import v1 as init_v1
from kio.schema.init_producer_id import v2 as init_v2
from kio.schema.init_producer_id import v3 as init_v3
from kio.schema.init_producer_id import v4 as init_v4
from kio.schema.produce.v9 import request as produce

from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_records

from .helpers import BASE_TS, RawClient, create_topic, fetch_raw, topic_name

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47

INIT_VERSIONS = [init_v0, init_v1, init_v2, init_v3, init_v4]


def init_producer(raw: RawClient, module=init_v4) -> tuple[int, int]:
    request = module.request.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)
    )
    response = raw.request(request)
    assert int(response.error_code) == NONE, response
    return int(response.producer_id), int(response.producer_epoch)


def batch(first: int, count: int, pid: int, epoch: int, sequence: int) -> bytes:
    records = [
        Record(BASE_TS + i, f"k{i}".encode(), f"value-{i}".encode(), (("h", b"x"),))
        for i in range(first, first + count)
    ]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence, compression=1
    )


def send(raw: RawClient, topic: str, data: bytes) -> tuple[int, int]:
    """(error code, base offset) of an acks=all produce of one batch to partition 0."""
    request = produce.ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce.TopicProduceData(
                name=topic, partition_data=(produce.PartitionProduceData(index=0, records=data),)
            ),
        ),
    )
    response = raw.request(request)
    (part,) = response.responses[0].partition_responses
    return int(part.error_code), int(part.base_offset)


def stored_values(raw: RawClient, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in partition 0."""
    out = []
    offset = 0
    while True:
        data = fetch_raw(raw, topic, 0, offset)
        records = [(r.offset, r.value) for r in iter_records(data)] if data else []
        records = [r for r in records if r[0] >= offset]
        if not records:
            return out
        out += records
        offset = records[-1][0] + 1


def values(first: int, count: int) -> list[bytes]:
    return [f"value-{i}".encode() for i in range(first, first + count)]


@pytest.fixture
def topic(broker):
    name = topic_name("idem")
    create_topic(broker.bootstrap, name, partitions=1)
    return name


@pytest.mark.parametrize("module", INIT_VERSIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_init_producer_id_every_version(broker, module):
    with RawClient(broker.bootstrap) as raw:
        first = init_producer(raw, module)
        second = init_producer(raw, module)
    assert first[0] >= 0 and first[1] >= 0
    assert second[0] != first[0], "each idempotent producer gets its own id"


def test_retried_batch_gets_its_first_offsets_and_is_stored_once(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        first = batch(0, 5, pid, epoch, 0)
        second = batch(5, 3, pid, epoch, 5)
        assert send(raw, topic, first) == (NONE, 0)
        assert send(raw, topic, second) == (NONE, 5)
        # Retries of both, as a producer that lost the responses would send them.
        assert send(raw, topic, first) == (NONE, 0)
        assert send(raw, topic, second) == (NONE, 5)
        assert send(raw, topic, batch(8, 2, pid, epoch, 8)) == (NONE, 8)
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 10)))


def test_retry_is_deduplicated_across_a_restart(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        assert send(raw, topic, batch(0, 4, pid, epoch, 0)) == (NONE, 0)
        last = batch(4, 4, pid, epoch, 4)
        assert send(raw, topic, last) == (NONE, 4)
    broker.restart()
    with RawClient(broker.bootstrap) as raw:
        assert send(raw, topic, last) == (NONE, 4)
        # The sequence carries on where it was.
        assert send(raw, topic, batch(8, 2, pid, epoch, 8)) == (NONE, 8)
        assert send(raw, topic, batch(20, 1, pid, epoch, 20))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 10)))


def test_sequence_gap_is_out_of_order_and_not_stored(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        assert send(raw, topic, batch(0, 5, pid, epoch, 0)) == (NONE, 0)
        error, _ = send(raw, topic, batch(10, 5, pid, epoch, 10))
        assert error == OUT_OF_ORDER_SEQUENCE_NUMBER
        # The gap is refused, the in-order batch after it is not.
        assert send(raw, topic, batch(5, 5, pid, epoch, 5)) == (NONE, 5)
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 10)))


def test_only_the_last_five_batches_are_remembered(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        batches = [batch(i, 1, pid, epoch, i) for i in range(6)]
        for i, b in enumerate(batches):
            assert send(raw, topic, b) == (NONE, i)
        # Batches 1..5 are the last five: their retries are answered from memory.
        assert send(raw, topic, batches[1]) == (NONE, 1)
        assert send(raw, topic, batches[5]) == (NONE, 5)
        # Batch 0 is older than that: Kafka calls it out of order.
        assert send(raw, topic, batches[0])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 6)))


def test_older_epoch_is_refused(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        assert send(raw, topic, batch(0, 2, pid, epoch, 0)) == (NONE, 0)
        # A bumped epoch starts its sequence again at 0.
        assert send(raw, topic, batch(2, 2, pid, epoch + 1, 0)) == (NONE, 2)
        error, _ = send(raw, topic, batch(4, 2, pid, epoch, 2))
        assert error == INVALID_PRODUCER_EPOCH
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 4)))


def test_producers_are_independent(broker, topic):
    with RawClient(broker.bootstrap) as raw:
        a = init_producer(raw)
        b = init_producer(raw)
        batch_a = batch(0, 3, *a, 0)
        assert send(raw, topic, batch_a) == (NONE, 0)
        assert send(raw, topic, batch(3, 3, *b, 0)) == (NONE, 3)
        assert send(raw, topic, batch_a) == (NONE, 0)
        assert send(raw, topic, batch(6, 1, *a, 3)) == (NONE, 6)
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 7)))


def test_retry_is_deduplicated_after_kill_9(broker_process):
    """acks=all answered means the batch, and the producer state it implies, survive a
    SIGKILL: the retry after restart is answered with the first offsets."""
    broker = broker_process
    topic = topic_name("idemkill")
    create_topic(broker.bootstrap, topic, partitions=1)
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        assert send(raw, topic, batch(0, 3, pid, epoch, 0)) == (NONE, 0)
        last = batch(3, 3, pid, epoch, 3)
        assert send(raw, topic, last) == (NONE, 3)
    broker.kill()
    broker.start()
    with RawClient(broker.bootstrap) as raw:
        assert send(raw, topic, last) == (NONE, 3)
        assert send(raw, topic, batch(6, 1, pid, epoch, 6)) == (NONE, 6)
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 7)))


def test_retry_is_deduplicated_across_segments_and_restart(broker_factory):
    """Producer state spans segment rolls: the last five batches sit in several
    segments, and all of them are still recognised after a restart."""
    broker = broker_factory({"log.segment.bytes": "1024"})
    topic = topic_name("idemroll")
    create_topic(broker.bootstrap, topic, partitions=1)
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        batches = [batch(i * 10, 10, pid, epoch, i * 10) for i in range(8)]
        for i, b in enumerate(batches):
            assert send(raw, topic, b) == (NONE, i * 10)
    broker.restart()
    with RawClient(broker.bootstrap) as raw:
        for i in range(3, 8):
            assert send(raw, topic, batches[i]) == (NONE, i * 10)
        assert send(raw, topic, batches[2])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        stored = stored_values(raw, topic)
    assert stored == list(enumerate(values(0, 80)))
    bases = sorted(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))
    # The test means the five remembered batches (offsets 30..79) to span a roll.
    assert any(30 < base < 80 for base in bases), f"segment bases {bases}"
