# Message sets of magic 0 and 1, as Produce v0-2 clients may send them, turned
# into one record batch v2 (Kafka's up-conversion). A message set is a sequence of
#
#   offset int64, message_size int32, then the message:
#   crc uint32 (CRC-32 of the rest), magic int8, attributes int8,
#   [magic 1: timestamp int64], key bytes (int32 length, -1 = null), value bytes
#
# attributes bits 0-2 are the codec (1 gzip, 2 snappy, 3 lz4); a compressed
# message's value is a whole inner message set. Old clients only: this decodes
# every message, which the v2 path never does.
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from chronik.records import compression
from chronik.records.batch import CORRUPT_MESSAGE, InvalidBatch
from chronik.records.builder import Record, build_batch

_ENTRY = struct.Struct(">qi")
_HEAD = struct.Struct(">Ibb")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
NO_TIMESTAMP = -1


def is_legacy(records: bytes) -> bool:
    return len(records) > 16 and records[16] in (0, 1)


def _bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise InvalidBatch(CORRUPT_MESSAGE, "message truncated")
    (length,) = _I32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise InvalidBatch(CORRUPT_MESSAGE, "message truncated")
    return bytes(buf[pos : pos + length]), pos + length


def _messages(data: bytes, depth: int = 0) -> Iterator[tuple[int, Record]]:
    """(codec, record) for every message, descending into compressed wrappers."""
    buf = memoryview(data)
    pos = 0
    while pos + _ENTRY.size <= len(buf):
        _offset, size = _ENTRY.unpack_from(buf, pos)
        start = pos + _ENTRY.size
        end = start + size
        if size < _HEAD.size + 8 or end > len(buf):
            if depth == 0 and end > len(buf):
                raise InvalidBatch(CORRUPT_MESSAGE, "message set ends inside a message")
            break
        crc, magic, attributes = _HEAD.unpack_from(buf, start)
        if zlib.crc32(buf[start + 4 : end]) != crc:
            raise InvalidBatch(CORRUPT_MESSAGE, "message CRC-32 does not match")
        if magic not in (0, 1):
            raise InvalidBatch(CORRUPT_MESSAGE, f"unexpected magic {magic} in a message set")
        field = start + _HEAD.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _I64.unpack_from(buf, field)
            field += 8
        key, field = _bytes(buf, field)
        value, field = _bytes(buf, field)
        codec = attributes & 0x07
        if codec:
            if value is None or depth > 0:
                raise InvalidBatch(CORRUPT_MESSAGE, "bad compressed message")
            try:
                inner = compression.decompress(codec, value)
            except Exception as exc:
                raise InvalidBatch(CORRUPT_MESSAGE, f"cannot decompress message: {exc}") from exc
            for _, record in _messages(inner, depth + 1):
                yield codec, record
        else:
            yield 0, Record(timestamp=timestamp, key=key, value=value, headers=())
        pos = end


def up_convert(records: bytes) -> bytes:
    """One v2 batch holding every message of a magic 0/1 message set."""
    converted = list(_messages(records))
    if not converted:
        raise InvalidBatch(CORRUPT_MESSAGE, "empty message set")
    codec = max(c for c, _ in converted)
    return build_batch([r for _, r in converted], compression=codec)
