"""Confluent's wire format: the header a Schema Registry serializer puts before a
serialized key or value.

    byte 0      magic byte, 0
    bytes 1-4   schema id, int32 big-endian (the registry's global id)
    Protobuf only, then: the message indexes, zig-zag varints: a count, then that many
                indexes (the path from the file's top-level messages to the message
                serialized); a count of 0 (a single 0 byte) stands for [0], the first
                message
    then        the serialized payload

Only the header is read here; nothing of the payload.
"""

from __future__ import annotations

MAGIC = 0
HEADER_SIZE = 5
# Deeper than any message nesting protoc accepts: a longer index list is malformed.
MAX_INDEXES = 100


class WireError(ValueError):
    """Bytes that do not hold Confluent's header."""


def schema_id(head: bytes | bytearray | memoryview) -> int | None:
    """The schema id of a key or value that starts with the header (only its first five
    bytes are read), else None."""
    if len(head) < HEADER_SIZE or head[0] != MAGIC:
        return None
    return int.from_bytes(head[1:HEADER_SIZE], "big", signed=True)


def _varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    z = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise WireError("malformed message index varint")
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


def message_indexes(
    data: bytes | bytearray | memoryview, pos: int = HEADER_SIZE
) -> tuple[list[int], int]:
    """(message indexes, position after them) of a Protobuf key or value, read from
    ``pos`` (just after the schema id); WireError if they are malformed."""
    count, pos = _varint(data, pos)
    if count == 0:
        return [0], pos
    if not 0 < count <= MAX_INDEXES:
        raise WireError(f"message index count {count} out of range")
    indexes = []
    for _ in range(count):
        index, pos = _varint(data, pos)
        if index < 0:
            raise WireError(f"negative message index {index}")
        indexes.append(index)
    return indexes, pos


def _write_varint(out: bytearray, value: int) -> None:
    z = (value << 1) ^ (value >> 31)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def encode_message_indexes(indexes: list[int]) -> bytes:
    """The message indexes as a serializer writes them ([0] as a single 0 byte)."""
    if indexes == [0]:
        return b"\x00"
    out = bytearray()
    _write_varint(out, len(indexes))
    for index in indexes:
        _write_varint(out, index)
    return bytes(out)


def header(schema: int, indexes: list[int] | None = None) -> bytes:
    """The header before a payload serialized with schema id ``schema`` (and, for
    Protobuf, the message at ``indexes``)."""
    out = bytes([MAGIC]) + schema.to_bytes(4, "big", signed=True)
    return out if indexes is None else out + encode_message_indexes(indexes)
