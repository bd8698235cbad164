# Reads concatenated record batches (layout in chronik.records.batch; record layout
# in chronik.records.builder). Not on the fetch/produce hot path: used by compaction,
# the group coordinator's replay, offset-for-timestamp inside one batch, the key check
# of batches produced to compacted topics, and tests.
from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from chronik.records import compression as codecs
from chronik.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    read_header,
)
from chronik.records.varint import read_varint


class CorruptRecords(ValueError):
    """A batch whose records cannot be decoded (the CRC only says they arrived as sent)."""


class DecodedRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch; stops at a truncated or malformed tail."""
    end = len(buf)
    pos = start
    while pos + HEADER_SIZE <= end:
        header = read_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    try:
        return read_varint(view, pos)
    except ValueError as exc:
        raise CorruptRecords(str(exc)) from exc


def _field(view: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _varint(view, pos)
    if length < 0:
        return None, pos
    if pos + length > len(view):
        raise CorruptRecords("record field runs past the end of the batch")
    return bytes(view[pos : pos + length]), pos + length


def iter_records(
    batch: bytes | bytearray | memoryview, only: AbstractSet[int] | None = None
) -> Iterator[DecodedRecord]:
    """The records of one batch (decompressed as needed). LogAppendTime batches report the
    batch's maxTimestamp for every record, as Kafka's clients do. With ``only``, just the
    records at those offsets: the others are stepped over by their length, undecoded, and
    the walk stops once every wanted offset has come (a read by key wants a few records
    of a batch that may hold thousands)."""
    header = read_header(batch)
    view = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        try:
            view = memoryview(codecs.decompress(header.compression, view))
        except Exception as exc:  # cramjam's DecompressionError, an unknown codec
            raise CorruptRecords(f"cannot decompress records: {exc}") from exc
    append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    pos = 0
    left = len(only) if only is not None else -1
    for _ in range(header.records_count):
        length, pos = _varint(view, pos)
        end = pos + length
        if length < 0 or end > len(view):
            raise CorruptRecords("record runs past the end of the batch")
        pos += 1  # attributes
        ts_delta, pos = _varint(view, pos)
        offset_delta, pos = _varint(view, pos)
        if only is not None:
            if header.base_offset + offset_delta not in only:
                pos = end
                continue
            left -= 1
        key, pos = _field(view, pos)
        value, pos = _field(view, pos)
        count, pos = _varint(view, pos)
        headers = []
        for _ in range(count):
            hkey, pos = _field(view, pos)
            hval, pos = _field(view, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise CorruptRecords("record length does not match its fields")
        ts = append_time if append_time is not None else header.base_timestamp + ts_delta
        yield DecodedRecord(header.base_offset + offset_delta, ts, key, value, tuple(headers))
        if left == 0:
            return


def keyless_records(batch: bytes | bytearray | memoryview) -> list[int]:
    """Indexes in the batch of the records whose key is null (decompressed as needed);
    Kafka refuses them on compacted topics. Raises ValueError on a malformed record."""
    header = read_header(batch)
    view = memoryview(batch)[HEADER_SIZE : header.size]
    if header.compression:
        view = memoryview(codecs.decompress(header.compression, view))
    found = []
    pos = 0
    for index in range(header.records_count):
        length, pos = read_varint(view, pos)
        end = pos + length
        if length < 0 or end > len(view):
            raise ValueError("record runs past the end of the batch")
        field = pos + 1  # attributes
        _, field = read_varint(view, field)  # timestamp delta
        _, field = read_varint(view, field)  # offset delta
        key_length, field = read_varint(view, field)
        if field > end:
            raise ValueError("record length does not match its fields")
        if key_length < 0:
            found.append(index)
        pos = end
    return found
