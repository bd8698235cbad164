"""Batches whose CRC is right but whose records cannot be decoded.

The broker stores a client's batch as bytes and decodes records only where it must
(timestamp lookups, recompression, compaction), so those places meet records a
client mangled before sealing them with a valid CRC. Each answers with an error
code; none raises (a traceback and a dropped connection per request).
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kio.schema.list_offsets.v7 import request as list_offsets

from chronik.records.builder import Record, build_batch

from .rawclient import RawClient
from .test_bad_input import create_topic, latest_offset, produce_request

CORRUPT_MESSAGE = 2


def garbled(compression: int, codec_bits: int | None = None) -> bytes:
    """A batch whose compressed records section is junk, under a valid CRC."""
    batch = bytearray(
        build_batch([Record(timestamp=1000, key=b"k", value=b"v" * 40)], compression=compression)
    )
    batch[61:] = b"\x5a" * (len(batch) - 61)
    if codec_bits is not None:
        (attributes,) = struct.unpack_from(">h", batch, 21)
        struct.pack_into(">h", batch, 21, (attributes & ~0x07) | codec_bits)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def list_offsets_request(topic: str, timestamp: int) -> list_offsets.ListOffsetsRequest:
    return list_offsets.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            list_offsets.ListOffsetsTopic(
                name=topic,
                partitions=(
                    list_offsets.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=timestamp
                    ),
                ),
            ),
        ),
    )


def test_timestamp_lookup_over_undecodable_records_gets_an_error_code(broker, caplog) -> None:
    create_topic(broker.bootstrap, "garbled")
    with RawClient(broker.bootstrap) as client:
        stored = client.request(produce_request("garbled", garbled(compression=1)))
        assert int(stored.responses[0].partition_responses[0].error_code) == 0
        for n, timestamp in enumerate((500, -3), start=2):
            response = client.request(list_offsets_request("garbled", timestamp), n)
            part = response.topics[0].partitions[0]
            assert int(part.error_code) == CORRUPT_MESSAGE
        latest = client.request(list_offsets_request("garbled", -1), 9)
        assert latest.topics[0].partitions[0].offset == 1
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_recompressing_undecodable_records_gets_corrupt_message(broker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic("to-zstd", 1, 1, config={"compression.type": "zstd"})
    admin.create_topics([topic])["to-zstd"].result(15)
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("to-zstd", garbled(compression=1)))
        assert int(response.responses[0].partition_responses[0].error_code) == CORRUPT_MESSAGE
        assert not client.is_closed(0.2)
    assert latest_offset(broker, "to-zstd") == 0


def test_unknown_codec_is_rejected(broker) -> None:
    create_topic(broker.bootstrap, "codec-seven")
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("codec-seven", garbled(1, codec_bits=7)))
    assert int(response.responses[0].partition_responses[0].error_code) == CORRUPT_MESSAGE
    assert latest_offset(broker, "codec-seven") == 0


def test_clients_cannot_append_to_consumer_offsets(broker_process) -> None:
    # Kafka answers INVALID_TOPIC_EXCEPTION ("Cannot append to internal topic"): what a
    # client wrote there would be replayed as group state at every start.
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker_process.bootstrap, "group.id": "g"})
    consumer.subscribe(["anything"])
    consumer.poll(3)  # the coordinator creates __consumer_offsets
    consumer.close()
    with RawClient(broker_process.bootstrap) as client:
        response = client.request(produce_request("__consumer_offsets", garbled(compression=1)))
    assert int(response.responses[0].partition_responses[0].error_code) == 17
    assert broker_process.terminate() == 0
    broker_process.start()
    with RawClient(broker_process.bootstrap) as client:
        assert client.request(list_offsets_request("__consumer_offsets", -1)).topics


def test_undecodable_batch_in_consumer_offsets_does_not_stop_a_restart(broker) -> None:
    # However such bytes got there, replaying group state skips them with a warning.
    from confluent_kafka import Consumer

    from chronik.records.batch import read_header

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    consumer.subscribe(["anything"])
    consumer.poll(3)
    consumer.close()
    junk = bytearray(garbled(compression=1))
    plog = broker.broker.catalog.get("__consumer_offsets").partitions[0]
    broker._loop.call_soon_threadsafe(plog.append, junk, read_header(junk), 0)
    broker.restart()
    with RawClient(broker.bootstrap) as client:
        assert client.request(list_offsets_request("__consumer_offsets", -1)).topics


def test_consumer_offsets_cannot_be_deleted(broker) -> None:
    # Deleting it left the coordinator appending to closed files: a traceback for
    # every later OffsetCommit, and every committed offset gone.
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "committed")
    config = {"bootstrap.servers": broker.bootstrap, "group.id": "keeps", "log_level": 0}
    consumer = Consumer(config)
    consumer.commit(offsets=[TopicPartition("committed", 0, 7)], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.delete_topics(["__consumer_offsets"], operation_timeout=10)["__consumer_offsets"]
    with pytest.raises(KafkaException, match="TOPIC_EXCEPTION"):
        future.result(15)
    consumer.commit(offsets=[TopicPartition("committed", 0, 8)], asynchronous=False)
    (committed,) = consumer.committed([TopicPartition("committed", 0)], timeout=15)
    assert committed.offset == 8
    consumer.close()
