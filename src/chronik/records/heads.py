# The first bytes of each record's key or value, for checks that look at a field's head
# only (Confluent's schema id header). The records section of a batch (layout in
# chronik.records.batch) holds, per record:
#   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
#   keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
#   headerCount varint | headers
# Varints are zig-zag.
#
# A field's head is coded as an int, so the walk allocates nothing per record:
#   >= 0  the field's first five bytes, big-endian (byte 0 in bits 32-39)
#   -1    a null field (HEAD_NULL)
#   -2    a field shorter than five bytes (HEAD_SHORT)
# and head_runs answers runs of equal heads ([first index, head, first index, head, ...]):
# the records of a batch from one producer mostly share one header, so one run.
#
# This is the per-record loop on the produce path of a topic that opts in to schema
# validation, so it is compiled with mypyc when the package is built (setup.py; `make`
# rebuilds it when this file changes) and runs as plain Python where no compiler was at
# hand. Kept free of classes and of third-party imports so the compiled and the
# interpreted module behave the same; chronik.records.compiled picks whichever is current.
# Malformed records raise ValueError, or IndexError where a field runs past the section.
from __future__ import annotations

from chronik.records import compression as codecs

HEAD_NULL = -1
HEAD_SHORT = -2
_BATCH_HEADER_SIZE = 61  # chronik.records.batch.HEADER_SIZE


def records_section(batch: bytes, size: int, codec: int) -> tuple[bytes, int, int]:
    """(buffer, start, end) of the records section of the batch of ``size`` bytes at the
    start of ``batch``: the batch itself when uncompressed (a copy would cost more than
    the walk), else the section decompressed with ``codec``."""
    if codec:
        return codecs.decompress(codec, memoryview(batch)[_BATCH_HEADER_SIZE:size]), 0, -1
    return batch, _BATCH_HEADER_SIZE, size


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``pos``, of any length."""
    z = 0
    shift = 0
    while True:
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


def _field_at(buf: bytes, pos: int, total: int, key: bool) -> tuple[int, int, int]:
    """(field position, field length, record end) of the record at ``pos``."""
    length, p = _varint(buf, pos)
    end = p + length
    if length < 1 or end > total:
        raise ValueError("a record runs past its batch")
    p += 1  # attributes
    while buf[p] > 0x7F:  # timestamp delta
        p += 1
    p += 1
    while buf[p] > 0x7F:  # offset delta
        p += 1
    p += 1
    n, p = _varint(buf, p)
    if not key:
        if n > 0:
            p += n
        n, p = _varint(buf, p)
    if n < -1 or p + n > end:
        raise ValueError("a record's fields do not match its length")
    return p, n, end


def head_runs(section: bytes, start: int, end: int, count: int, key: bool) -> list[int]:
    """Runs of records of the section at [start, end) of ``section`` (end -1: its end)
    whose key (``key``) or value has the same head code, in batch order, flat:
    [first index, head, first index, head, ...]."""
    # _field_at inlined, with the record's and the value's length read in place when they
    # take one or two bytes (records under 8 KiB): a fifth less time compiled, half
    # interpreted, than calling it per record.
    runs: list[int] = []
    buf = section
    total = len(buf) if end < 0 else end
    last = -3
    pos = start
    for index in range(count):
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            p = pos + 1
        else:
            c = buf[pos + 1]
            if c < 0x80:
                z = (b & 0x7F) | (c << 7)
                length = (z >> 1) ^ -(z & 1)
                p = pos + 2
            else:
                length, p = _varint(buf, pos)
        stop = p + length
        if length < 1 or stop > total:
            raise ValueError("a record runs past its batch")
        p += 1  # attributes
        while buf[p] > 0x7F:  # timestamp delta
            p += 1
        p += 1
        while buf[p] > 0x7F:  # offset delta
            p += 1
        p += 1
        b = buf[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = _varint(buf, p)
        if not key:
            if n > 0:
                p += n
            b = buf[p]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                c = buf[p + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    n = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    n, p = _varint(buf, p)
        if n < -1 or p + n > stop:
            raise ValueError("a record's fields do not match its length")
        if n >= 5:
            head = (
                (buf[p] << 32)
                | (buf[p + 1] << 24)
                | (buf[p + 2] << 16)
                | (buf[p + 3] << 8)
                | buf[p + 4]
            )
        elif n == -1:
            head = HEAD_NULL
        else:
            head = HEAD_SHORT
        if head != last:
            runs.append(index)
            runs.append(head)
            last = head
        pos = stop
    return runs


def fields(section: bytes, start: int, end: int, count: int, key: bool) -> list[bytes | None]:
    """Every key (``key``) or value of the records at [start, end) of ``section`` (end -1:
    its end), in batch order; None for a null one."""
    out: list[bytes | None] = []
    total = len(section) if end < 0 else end
    pos = start
    for _ in range(count):
        p, n, stop = _field_at(section, pos, total, key)
        out.append(None if n < 0 else section[p : p + n])
        pos = stop
    return out
