# Fetch response body, hand-encoded so record bytes go from the segment file to
# the socket without being copied into an encoder: a partition's records are one part of
# the list it answers (bytes, or a file region the connection sends as it lies).
# Versions 4-16:
#
#   throttle_time_ms int32
#   [v7+]  error_code int16, session_id int32
#   responses: array of
#     topic string (v4-12) | topic_id uuid (v13+)
#     partitions: array of
#       partition_index int32, error_code int16, high_watermark int64,
#       last_stable_offset int64, [v5+] log_start_offset int64,
#       aborted_transactions nullable array of (producer_id int64, first_offset int64
#         [flexible] tagged fields); empty for read_uncommitted,
#       [v11+] preferred_read_replica int32, records nullable bytes
#       [flexible] tagged fields
#     [flexible] tagged fields
#   [flexible] tagged fields
#
# Versions 12+ are flexible: arrays, strings and bytes carry uvarint lengths + 1.
from __future__ import annotations

import struct
from collections.abc import Sized
from typing import NamedTuple
from uuid import UUID

from chronik.protocol.framing import write_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_V7 = struct.Struct(">ihi")
_PARTITION = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


class PartitionResult(NamedTuple):
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    # The bytes, or anything else that knows its len() and that the connection writes
    # (a region of a segment file, sent with sendfile).
    records: Sized | None
    aborted: list[tuple[int, int]] | None = None  # read_committed: (producer id, first)


class TopicResult(NamedTuple):
    name: str
    topic_id: UUID
    partitions: list[PartitionResult]


def encode_fetch_response(
    version: int,
    topics: list[TopicResult],
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
) -> list[bytes]:
    flexible = version >= 12
    out: list[bytes] = []
    if version >= 7:
        out.append(_HEAD_V7.pack(throttle_ms, error_code, session_id))
    else:
        out.append(_I32.pack(throttle_ms))
    out.append(_array_len(len(topics), flexible))
    for topic in topics:
        if version >= 13:
            out.append(topic.topic_id.bytes)
        else:
            name = topic.name.encode()
            out.append(write_uvarint(len(name) + 1) if flexible else _I16.pack(len(name)))
            out.append(name)
        out.append(_array_len(len(topic.partitions), flexible))
        for p in topic.partitions:
            out.append(
                _PARTITION.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            )
            if version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            aborted = p.aborted or ()
            out.append(_array_len(len(aborted), flexible))
            for entry in aborted:
                out.append(_ABORTED.pack(*entry))
                if flexible:
                    out.append(b"\x00")
            if version >= 11:
                out.append(_I32.pack(-1))
            records = p.records
            if records is None:
                out.append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                out.append(write_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
                if records:
                    out.append(records)
            if flexible:
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
    if flexible:
        out.append(b"\x00")
    return out


def _array_len(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _I32.pack(n)
