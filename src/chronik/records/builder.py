# Builds record batch v2 bytes (layout in chronik.records.batch). Each record:
#   length varint, attributes int8 (0), timestampDelta varlong, offsetDelta varint,
#   keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
#   headerCount varint, then per header: keyLength varint, key (UTF-8),
#   valueLength varint (-1 = null), value.
# The records section is compressed as a whole when a codec is set.
# Used by internal writers (the group coordinator's __consumer_offsets) and tests;
# client batches are stored as sent and never rebuilt.
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

from chronik.records import compression as codecs
from chronik.records.batch import CRC_START, HEADER, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT
from chronik.records.varint import write_varint

CONTROL_BIT = 0x20
TRANSACTIONAL_BIT = 0x10
_CRC = struct.Struct(">I")


class Record(NamedTuple):
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _bytes_field(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def encode_records(
    records: Sequence[Record], base_timestamp: int, offset_deltas: Sequence[int] | None = None
) -> bytearray:
    out = bytearray()
    body = bytearray()
    for i, rec in enumerate(records):
        body.clear()
        body.append(0)
        write_varint(body, rec.timestamp - base_timestamp)
        write_varint(body, offset_deltas[i] if offset_deltas is not None else i)
        _bytes_field(body, rec.key)
        _bytes_field(body, rec.value)
        write_varint(body, len(rec.headers))
        for hkey, hvalue in rec.headers:
            _bytes_field(body, hkey.encode())
            _bytes_field(body, hvalue)
        write_varint(out, len(body))
        out += body
    return out


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    log_append_time: int | None = None,
    partition_leader_epoch: int = 0,
    offset_deltas: Sequence[int] | None = None,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """One batch holding ``records``. ``offset_deltas`` (ascending) keeps gaps between
    offsets, as compaction needs; by default records take consecutive offsets."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    timestamps = [r.timestamp for r in records]
    base_ts = timestamps[0]
    max_ts = max(timestamps)
    attributes = compression & 0x07
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_BIT
        max_ts = log_append_time
    body = encode_records(records, base_ts, offset_deltas)
    if compression:
        body = codecs.compress(compression, body)
    last_delta = offset_deltas[-1] if offset_deltas is not None else len(records) - 1
    buf = bytearray(HEADER.size)
    buf += body
    HEADER.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
        last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records),
    )
    _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)

