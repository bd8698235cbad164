"""Malformed input over a raw socket: the broker answers or closes, stays up, stores nothing bad."""

from __future__ import annotations

import datetime
import random
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9 import request as produce_v9

from chronik.records.builder import Record, build_batch

from .rawclient import RawClient


def assert_alive(bootstrap: str) -> None:
    with RawClient(bootstrap) as client:
        response = client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert response.error_code == 0
        assert any(k.api_key == 0 for k in response.api_keys)


def produce_request(topic: str, records: bytes, acks: int = 1) -> produce_v9.ProduceRequest:
    return produce_v9.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            produce_v9.TopicProduceData(
                name=topic,
                partition_data=(produce_v9.PartitionProduceData(index=0, records=records),),
            ),
        ),
    )


def create_topic(bootstrap: str, name: str) -> None:
    with RawClient(bootstrap) as client:
        response = client.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=name),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            )
        )
        assert response.topics[0].error_code == 0


def latest_offset(broker, topic: str) -> int:
    return broker.broker.catalog.get(topic).partitions[0].end_offset


@pytest.mark.parametrize(
    "payload",
    [
        # Whole frames of random bytes (seeded: a random size prefix could leave the
        # broker waiting for a body that never comes), behind an API key nobody serves.
        struct.pack(">ih", 62, 0x7F7F) + random.Random(1).randbytes(60),
        struct.pack(">ih", 16, -2) + random.Random(2).randbytes(14),
        struct.pack(">i", 2**31 - 1) + b"abc",
        struct.pack(">i", -5),
        struct.pack(">i", 3) + b"abc",
        struct.pack(">ihhi", 8, 3, 12, 7),  # a frame that ends before the client id
    ],
    ids=[
        "garbage",
        "random-body",
        "oversized-length",
        "negative-length",
        "tiny",
        "truncated-header",
    ],
)
def test_garbage_closes_connection_and_broker_survives(broker, payload: bytes) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(payload)
        assert client.is_closed()
    assert_alive(broker.bootstrap)


def test_truncated_frame_then_disconnect(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")
    assert_alive(broker.bootstrap)


def test_unknown_api_key_closes(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(struct.pack(">ihhih", 10, 999, 0, 1, -1))
        assert client.is_closed()
    assert_alive(broker.bootstrap)


def test_unknown_version_of_known_api_closes(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(struct.pack(">ihhih", 10, 3, 99, 1, -1))
        assert client.is_closed()
    assert_alive(broker.bootstrap)


def test_api_versions_at_unknown_version_gets_error_35_v0_body(broker) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(struct.pack(">ihhih", 10, 18, 99, 42, -1))
        frame = client.read_frame()
    assert frame is not None
    correlation, error, count = struct.unpack_from(">ihi", frame, 0)
    assert correlation == 42
    assert error == 35
    ranges = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
    assert (18, 0, 4) in ranges


def test_undecodable_body_closes(broker) -> None:
    # Metadata v12 with a topic array length claiming 1000 entries and no bytes.
    body = struct.pack(">hhih", 3, 12, 5, -1) + b"\x00" + b"\xe9\x07"
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(struct.pack(">i", len(body)) + body)
        assert client.is_closed()
    assert_alive(broker.bootstrap)


def test_bad_crc_is_rejected_and_nothing_stored(broker) -> None:
    create_topic(broker.bootstrap, "crc")
    batch = bytearray(build_batch([Record(timestamp=1, key=b"k", value=b"v" * 50, headers=())]))
    batch[-3] ^= 0xFF
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("crc", bytes(batch)))
    part = response.responses[0].partition_responses[0]
    assert int(part.error_code) == 2  # CORRUPT_MESSAGE
    assert latest_offset(broker, "crc") == 0
    assert_alive(broker.bootstrap)


def test_truncated_batch_is_rejected(broker) -> None:
    create_topic(broker.bootstrap, "short")
    batch = build_batch([Record(timestamp=1, key=None, value=b"x" * 100, headers=())])
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("short", batch[:-10]))
        assert int(response.responses[0].partition_responses[0].error_code) == 2
        response = client.request(produce_request("short", batch[:30]), correlation_id=2)
        assert int(response.responses[0].partition_responses[0].error_code) == 2
    assert latest_offset(broker, "short") == 0


def test_nonzero_base_offset_is_rejected(broker) -> None:
    create_topic(broker.bootstrap, "based")
    batch = build_batch([Record(timestamp=1, key=None, value=b"x", headers=())], base_offset=5)
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("based", batch))
    assert int(response.responses[0].partition_responses[0].error_code) == 87  # INVALID_RECORD
    assert latest_offset(broker, "based") == 0


def test_oversized_batch_gets_message_too_large(broker_factory) -> None:
    broker = broker_factory({"message.max.bytes": "1000"})
    create_topic(broker.bootstrap, "big")
    batch = build_batch([Record(timestamp=1, key=None, value=b"x" * 2000, headers=())])
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("big", batch))
    assert int(response.responses[0].partition_responses[0].error_code) == 10
    assert latest_offset(broker, "big") == 0


def test_good_batch_after_bad_ones_is_stored(broker) -> None:
    create_topic(broker.bootstrap, "mixed")
    good = build_batch([Record(timestamp=1, key=b"a", value=b"b", headers=())])
    bad = bytearray(good)
    bad[30] ^= 1
    with RawClient(broker.bootstrap) as client:
        assert (
            int(
                client.request(produce_request("mixed", bytes(bad)))
                .responses[0]
                .partition_responses[0]
                .error_code
            )
            == 2
        )
        ok = client.request(produce_request("mixed", good), correlation_id=2)
    part = ok.responses[0].partition_responses[0]
    assert int(part.error_code) == 0
    assert part.base_offset == 0
    assert latest_offset(broker, "mixed") == 1


def test_topic_compression_type_recompresses_batches(broker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from chronik.records.reader import iter_batches, iter_records

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic("zstd-topic", 1, 1, config={"compression.type": "zstd"})
    admin.create_topics([topic])["zstd-topic"].result(15)
    batch = build_batch(
        [Record(timestamp=5, key=b"k", value=b"v" * 500, headers=())], compression=1
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request("zstd-topic", batch))
    assert int(response.responses[0].partition_responses[0].error_code) == 0
    stored = broker.broker.catalog.get("zstd-topic").partitions[0].read(0, 10**6)
    ((_, header),) = list(iter_batches(stored))
    assert header.compression == 4
    assert [(r.key, r.value) for r in iter_records(stored)] == [(b"k", b"v" * 500)]
