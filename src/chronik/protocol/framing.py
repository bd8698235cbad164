# Kafka request/response framing.
#
# Every message on the wire is `int32 size` followed by `size` bytes.
# Request header v1: api_key int16, api_version int16, correlation_id int32,
#   client_id nullable string (int16 length, -1 = null; legacy even in v2).
# Request header v0: api_key, api_version, correlation_id only; Kafka's one user is
#   ControlledShutdown v0 (its ControlledShutdownRequest.json says so).
# Request header v2 (flexible API versions) adds tagged fields (uvarint count, then
#   uvarint tag + uvarint size + bytes each).
# Response header v0: correlation_id int32; v1 (flexible) adds an empty tagged-field
#   section (one 0x00 byte). ApiVersions responses always use header v0, so clients
#   that do not yet know the broker's versions can read them.
from __future__ import annotations

import struct
from typing import NamedTuple

SIZE = struct.Struct(">i")
HEADER_FIXED = struct.Struct(">hhi")
INT16 = struct.Struct(">h")
CORRELATION_ID = struct.Struct(">i")
# (api key, version) whose requests come with header v0: ControlledShutdown v0.
WITHOUT_CLIENT_ID = frozenset({(7, 0)})


class MalformedRequest(Exception):
    """The bytes cannot be a Kafka request; the connection is closed."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf: bytes | memoryview, offset: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise MalformedRequest("truncated varint")
        byte = buf[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def parse_header_prefix(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: enough to answer even an unknown API."""
    if len(frame) < HEADER_FIXED.size:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    return HEADER_FIXED.unpack_from(frame, 0)


def parse_header(frame: bytes, flexible: bool) -> RequestHeader:
    api_key, api_version, correlation_id = parse_header_prefix(frame)
    offset = HEADER_FIXED.size
    if (api_key, api_version) in WITHOUT_CLIENT_ID:
        return RequestHeader(api_key, api_version, correlation_id, None, offset)
    if len(frame) < offset + 2:
        raise MalformedRequest("truncated client id")
    (length,) = INT16.unpack_from(frame, offset)
    offset += 2
    client_id: str | None = None
    if length >= 0:
        if offset + length > len(frame):
            raise MalformedRequest("truncated client id")
        client_id = frame[offset : offset + length].decode("utf-8", "replace")
        offset += length
    elif length != -1:
        raise MalformedRequest(f"bad client id length {length}")
    if flexible:
        count, offset = read_uvarint(frame, offset)
        for _ in range(count):
            _tag, offset = read_uvarint(frame, offset)
            size, offset = read_uvarint(frame, offset)
            offset += size
        if offset > len(frame):
            raise MalformedRequest("truncated tagged fields")
    return RequestHeader(api_key, api_version, correlation_id, client_id, offset)


def response_header(correlation_id: int, flexible: bool) -> bytes:
    if flexible:
        return CORRELATION_ID.pack(correlation_id) + b"\x00"
    return CORRELATION_ID.pack(correlation_id)


def frame(parts: list[bytes]) -> list[bytes]:
    """Prefix a response's parts with its size."""
    return [SIZE.pack(sum(map(len, parts))), *parts]
