"""Confluent's wire format of a value written with a registered schema, as its serializers
write it and its deserializers read it:

  byte 0      magic byte, 0
  bytes 1-4   the schema id, a 32-bit big-endian signed integer (ids are positive)
  bytes 5-    the payload: Avro binary, UTF-8 JSON text, or (Protobuf) the message
              indexes followed by the message bytes

A value shorter than five bytes or starting with another byte is not framed.
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
