"""The first bytes of each record's key or value, for checks that look at a field's
head only (Confluent's schema id header). The records section of a batch (layout in
chronik.records.batch) holds, per record:

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | headers

Varints are zig-zag. This is a per-record loop on the produce path of a topic that opts
in to schema validation: it steps over each record by its length, decodes no more than
the varints before the field, and copies only the field's head. One- and two-byte varints
(every length below 8 KiB) are read inline; longer ones by the general loop.
"""

from __future__ import annotations

from chronik.records import compression as codecs
from chronik.records.batch import HEADER_SIZE, BatchHeader


class MalformedRecords(ValueError):
    """A records section whose records do not parse (the CRC only says it arrived as sent)."""


def records_section(batch: bytes | bytearray, header: BatchHeader) -> bytes:
    """The records section of one batch, decompressed if the batch is compressed."""
    body = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        try:
            return codecs.decompress(header.compression, body)
        except Exception as exc:  # cramjam's DecompressionError, an unknown codec
            raise MalformedRecords(f"cannot decompress records: {exc}") from None
    return bytes(body)


def _long_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of a varint at ``pos`` of any length (up to 10 bytes)."""
    z = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise MalformedRecords("varint longer than 10 bytes")


def field_heads(section: bytes, count: int, key: bool, size: int | None = 5) -> list[bytes | None]:
    """Per record, in batch order, the first ``size`` bytes of its key (``key``) or value
    (the whole field when ``size`` is None, shorter if the field is); None for a null
    field. MalformedRecords if the section does not hold ``count`` well-formed records."""
    try:
        return _heads(section, count, key, size if size is not None else len(section))
    except IndexError:
        raise MalformedRecords("record runs past the end of the batch") from None


def _heads(buf: bytes, count: int, key: bool, size: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    append = out.append
    total = len(buf)
    pos = 0
    for _ in range(count):
        # Record length; p: the attributes byte.
        b = buf[pos]
        if b < 0x80:
            p = pos + 1
            end = p + ((b >> 1) ^ -(b & 1))
        else:
            c = buf[pos + 1]
            if c < 0x80:
                z = (b & 0x7F) | (c << 7)
                p = pos + 2
                end = p + ((z >> 1) ^ -(z & 1))
            else:
                length, p = _long_varint(buf, pos)
                end = p + length
        if end > total or end <= p:
            raise MalformedRecords("record length out of the batch")
        # The timestamp and offset deltas, stepped over.
        p += 1
        while buf[p] > 0x7F:
            p += 1
        p += 1
        while buf[p] > 0x7F:
            p += 1
        p += 1
        # Key length, then (for the value) the key stepped over and the value length.
        b = buf[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = _long_varint(buf, p)
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
                    n, p = _long_varint(buf, p)
        if p + n > end:
            raise MalformedRecords("record length does not match its fields")
        if n >= size:
            append(buf[p : p + size])
        elif n >= 0:
            append(buf[p : p + n])
        elif n == -1:
            append(None)
        else:
            raise MalformedRecords(f"field length {n}")
        pos = end
    return out
