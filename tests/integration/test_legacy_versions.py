"""The protocol versions Kafka 4.0 dropped but older clients still negotiate.

librdkafka before 2.10 (kcat's 2.0.2 among them) only compresses with gzip,
snappy or lz4 when the broker's Produce range reaches v0, so chronik serves
Produce v0-2, up-converting message formats v0/v1 to record batch v2.
"""

from __future__ import annotations

import datetime
import struct
import zlib

import pytest

from chronik.protocol.legacy import REQUESTS
from chronik.records import compression
from chronik.records.reader import iter_batches, iter_records

from .rawclient import RawClient
from .test_bad_input import create_topic


def message(
    magic: int, key: bytes | None, value: bytes | None, ts: int = 0, codec: int = 0
) -> bytes:
    body = struct.pack(">bb", magic, codec)
    if magic == 1:
        body += struct.pack(">q", ts)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">I", zlib.crc32(body)) + body


def message_set(messages: list[bytes]) -> bytes:
    return b"".join(struct.pack(">qi", i, len(m)) + m for i, m in enumerate(messages))


def produce(client: RawClient, version: int, topic: str, records: bytes) -> object:
    cls = REQUESTS[0, version]
    pdata = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = pdata.__dataclass_fields__["partition_data"].type.__args__[0]
    request = cls(
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(pdata(name=topic, partition_data=(part_cls(index=0, records=records),)),),
    )
    return client.request(request)


def stored(broker, topic: str) -> list[tuple[int, bytes | None, bytes | None, int]]:
    data = broker.broker.catalog.get(topic).partitions[0].read(0, 10**7)
    return [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(data)]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_2_with_magic_1_messages(broker, version: int) -> None:
    create_topic(broker.bootstrap, "old")
    msgs = message_set([message(1, b"k1", b"v1", 1000), message(1, None, b"v2", 2000)])
    with RawClient(broker.bootstrap) as client:
        response = produce(client, version, "old", msgs)
    part = response.responses[0].partition_responses[0]
    assert int(part.error_code) == 0
    assert part.base_offset == 0
    assert stored(broker, "old") == [(0, b"k1", b"v1", 1000), (1, None, b"v2", 2000)]


def test_produce_v0_magic_0_gets_no_timestamp(broker) -> None:
    create_topic(broker.bootstrap, "older")
    with RawClient(broker.bootstrap) as client:
        response = produce(client, 0, "older", message_set([message(0, b"a", b"b")]))
    assert int(response.responses[0].partition_responses[0].error_code) == 0
    assert stored(broker, "older") == [(0, b"a", b"b", -1)]


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4])
def test_compressed_wrapper_messages_are_unpacked(broker, codec: int) -> None:
    create_topic(broker.bootstrap, "wrapped")
    inner = message_set([message(1, b"k", f"v{i}".encode(), 10 + i) for i in range(5)])
    wrapper = message_set([message(1, None, compression.compress(codec, inner), 14, codec)])
    with RawClient(broker.bootstrap) as client:
        response = produce(client, 2, "wrapped", wrapper)
    assert int(response.responses[0].partition_responses[0].error_code) == 0
    assert [v for _, _, v, _ in stored(broker, "wrapped")] == [f"v{i}".encode() for i in range(5)]
    data = broker.broker.catalog.get("wrapped").partitions[0].read(0, 10**7)
    assert [h.compression for _, h in iter_batches(data)] == [codec]


def test_bad_message_crc_is_corrupt_and_not_stored(broker) -> None:
    create_topic(broker.bootstrap, "badcrc")
    msgs = bytearray(message_set([message(1, b"k", b"value", 1)]))
    msgs[-1] ^= 0xFF
    with RawClient(broker.bootstrap) as client:
        response = produce(client, 2, "badcrc", bytes(msgs))
    assert int(response.responses[0].partition_responses[0].error_code) == 2
    assert broker.broker.catalog.get("badcrc").partitions[0].end_offset == 0


def test_list_offsets_v0_and_create_topics_v0_and_describe_configs_v0(broker) -> None:
    lo_cls = REQUESTS[2, 0]
    ct_cls = REQUESTS[19, 0]
    dc_cls = REQUESTS[32, 0]
    topic_cls = ct_cls.__dataclass_fields__["topics"].type.__args__[0]
    with RawClient(broker.bootstrap) as client:
        created = client.request(
            ct_cls(
                topics=(
                    topic_cls(
                        name="v0topic",
                        num_partitions=2,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=datetime.timedelta(seconds=5),
            )
        )
        assert [(t.name, int(t.error_code)) for t in created.topics] == [("v0topic", 0)]
        produce(client, 2, "v0topic", message_set([message(1, b"k", b"v", 5)] * 3))
        ltopic = lo_cls.__dataclass_fields__["topics"].type.__args__[0]
        lpart = ltopic.__dataclass_fields__["partitions"].type.__args__[0]
        offsets = client.request(
            lo_cls(
                replica_id=-1,
                topics=(
                    ltopic(
                        name="v0topic",
                        partitions=(lpart(partition_index=0, timestamp=-1, max_num_offsets=1),),
                    ),
                ),
            )
        )
        assert tuple(offsets.topics[0].partitions[0].old_style_offsets) == (3,)
        resource = dc_cls.__dataclass_fields__["resources"].type.__args__[0]
        described = client.request(
            dc_cls(
                resources=(
                    resource(resource_type=2, resource_name="v0topic", configuration_keys=None),
                )
            )
        )
        entries = {c.name: c for c in described.results[0].configs}
        assert entries["cleanup.policy"].value == "delete"
        assert entries["cleanup.policy"].is_default
