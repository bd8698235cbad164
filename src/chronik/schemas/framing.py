"""Confluent's wire format of a value written with a registered schema, as its serializers
write it and its deserializers read it:

  byte 0      magic byte, 0
  bytes 1-4   the schema id, a 32-bit big-endian signed integer (ids are positive)
  bytes 5-    the payload: Avro binary, UTF-8 JSON text, or (Protobuf) the message
              indexes followed by the message bytes

A value shorter than five bytes or starting with another byte is not framed.

A Protobuf payload opens with its message indexes, the path of the message in the schema
(Confluent's serializers, any language): the count of indexes, then each index, every
number a zigzag varint (as Avro's long); the path [0] (the first message) is the single
byte 0 (a count of 0).
"""

from __future__ import annotations

import struct

MAGIC = 0
HEADER = struct.Struct(">bi")
HEADER_SIZE = HEADER.size


def frame(schema_id: int, payload: bytes) -> bytes:
    """The framed value of ``payload`` written with schema ``schema_id``."""
    return HEADER.pack(MAGIC, schema_id) + payload


def unframe(value: bytes) -> tuple[int, bytes] | None:
    """(schema id, payload) of a framed value; None when the value is not framed."""
    if len(value) < HEADER_SIZE or value[0] != MAGIC:
        return None
    _, schema_id = HEADER.unpack_from(value)
    if schema_id < 0:
        return None
    return schema_id, bytes(value[HEADER_SIZE:])


MAX_INDEXES = 100


class FramingError(ValueError):
    """Message indexes that are cut short or out of bounds."""


def message_indexes(indexes: list[int]) -> bytes:
    """The message indexes ahead of a Protobuf payload."""
    if indexes in ([], [0]):
        return b"\x00"
    out = bytearray(_zigzag(len(indexes)))
    for index in indexes:
        out += _zigzag(index)
    return bytes(out)


def read_message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """(message indexes, the message bytes) of a framed Protobuf payload."""
    count, at = _read_zigzag(payload, 0)
    if count == 0:
        return [0], payload[at:]
    if not 0 < count <= MAX_INDEXES:
        raise FramingError(f"message index count {count} is not 1 to {MAX_INDEXES}")
    indexes = []
    for _ in range(count):
        index, at = _read_zigzag(payload, at)
        if index < 0:
            raise FramingError(f"negative message index {index}")
        indexes.append(index)
    return indexes, payload[at:]


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_zigzag(data: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if at >= len(data):
            raise FramingError("message indexes cut short")
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), at
        shift += 7
        if shift > 63:
            raise FramingError("a message index varint longer than 10 bytes")
