"""Confluent's wire format of a schema'd key or value, as its serializers write it.

byte 0       magic, always 0
bytes 1-4    schema id, int32 big-endian, as the registry numbers it
Protobuf only: the message indexes, the path of the message in its .proto file:
             a zig-zag varint count, then that many zig-zag varints; a single 0 byte
             (count 0) stands for [0], the file's first message
the rest     the payload: Avro binary (no container), JSON text, or protobuf bytes
"""

from __future__ import annotations

import struct

MAGIC = 0
HEADER = struct.Struct(">bI")
HEADER_SIZE = HEADER.size  # 5
MAX_INDEXES = 100


class FramingError(ValueError):
    """Bytes that are not in Confluent's wire format."""


def split(data: bytes) -> tuple[int, int]:
    """(schema id, where the payload starts) of a framed value."""
    if len(data) < HEADER_SIZE:
        raise FramingError(f"{len(data)} bytes, fewer than the 5 of Confluent's header")
    if data[0] != MAGIC:
        raise FramingError(f"magic byte {data[0]}, not 0: not Confluent's wire format")
    return HEADER.unpack_from(data)[1], HEADER_SIZE


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise FramingError("message indexes run past the end of the value")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def message_indexes(data: bytes, pos: int) -> tuple[list[int], int]:
    """The protobuf message indexes at ``pos``, and where the payload starts."""
    count, pos = _varint(data, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= MAX_INDEXES:
        raise FramingError(f"message index count {count} out of range")
    out = []
    for _ in range(count):
        index, pos = _varint(data, pos)
        out.append(index)
    return out, pos


def _zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def header(schema_id: int, indexes: list[int] | None = None) -> bytes:
    """The bytes before a payload; ``indexes`` for protobuf."""
    head = HEADER.pack(MAGIC, schema_id)
    if indexes is None:
        return head
    if indexes == [0]:
        return head + b"\x00"
    return head + _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)
