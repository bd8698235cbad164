"""An Arrow batch of the sink's rows (Spark's Kafka sink layout) cut into record batches v2,
one run of rows per topic partition, without a Python call per row.

The columns go to record_encode as numpy views of Arrow's buffers: a binary column as its
offsets, data and validity; headers (``array<struct<key:string,value:binary>>``) as the
list's offsets and validity and the key and value columns. Each partition's rows become
records sections of at most ``batch_bytes`` bytes and ``batch_records`` records, then
batches: compressed as a whole, header and CRC-32C as chronik.records.builder writes them.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

import cramjam
import numpy as np
import pyarrow as pa
from crc32c import crc32c

from chronik.records import compression as codecs
from chronik.records.batch import CRC_START, HEADER, LOG_OVERHEAD, TRANSACTIONAL_BIT
from chronik.spark import record_encode as enc
from chronik.spark.options import OptionError

_CRC = struct.Struct(">I")
_NO_EXTRA = np.empty(0, np.uint8)
# LZ4 frame (what Kafka's lz4 codec carries, chronik.records.compression): magic, FLG 0x60
# (version 1, independent blocks, no checksums, no content size), BD 0x40 (64 KB blocks, as
# librdkafka and Java write), header checksum; then blocks, each an int32 LE size (high bit:
# stored uncompressed) and the raw LZ4 block; then a zero end mark.
_LZ4_HEADER = bytes.fromhex("04224d18604082")
_LZ4_BLOCK = 64 * 1024
_LZ4_END = b"\0\0\0\0"
_LE32 = struct.Struct("<I")


def lz4_frame(data: np.ndarray) -> bytes:
    """The LZ4 frame of ``data`` from raw blocks: cramjam's frame compressor costs several
    times more on the sink's batches."""
    view = memoryview(data)
    parts = [_LZ4_HEADER]
    for start in range(0, len(view), _LZ4_BLOCK):
        raw = view[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        if len(block) >= len(raw):
            parts += (_LE32.pack(len(raw) | 0x80000000), bytes(raw))
        else:
            parts += (_LE32.pack(len(block)), block)
    parts.append(_LZ4_END)
    return b"".join(parts)


def compress(codec: int, section: np.ndarray) -> bytes | np.ndarray:
    if codec == codecs.NONE:
        return section
    if codec == codecs.LZ4:
        return lz4_frame(section)
    return codecs.compress(codec, section)


@dataclass(frozen=True)
class Binary:
    """A binary column as record_encode takes it."""

    valid: np.ndarray  # bool, one per row
    off: np.ndarray  # int64, rows + 1 positions in data
    data: np.ndarray  # uint8

    @staticmethod
    def nulls(n: int) -> Binary:
        return Binary(np.zeros(n, np.bool_), np.zeros(n + 1, np.int64), _NO_EXTRA)


def _validity(column: pa.Array) -> np.ndarray:
    if column.null_count == 0:
        return np.ones(len(column), np.bool_)
    return column.is_valid().to_numpy(zero_copy_only=False)


def binary(column: pa.Array | None, n: int, name: str) -> Binary:
    """A string or binary column (Spark's Kafka sink takes either), UTF-8 for strings."""
    if column is None:
        return Binary.nulls(n)
    kind = column.type
    if pa.types.is_null(kind):
        return Binary.nulls(n)
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind):
        column = column.cast(pa.binary())
    elif not pa.types.is_binary(kind):
        raise OptionError(f"column '{name}' must be string or binary, not {kind}")
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[column.offset : column.offset + n + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else _NO_EXTRA
    return Binary(_validity(column), offsets.astype(np.int64), data)


@dataclass(frozen=True)
class Headers:
    valid: np.ndarray
    off: np.ndarray
    keys: Binary
    values: Binary

    @staticmethod
    def none(n: int) -> Headers:
        return Headers(np.zeros(n, np.bool_), np.zeros(n + 1, np.int64), Binary.nulls(0),
                       Binary.nulls(0))


def headers(column: pa.Array | None, n: int) -> Headers:
    if column is None or pa.types.is_null(column.type):
        return Headers.none(n)
    if not (pa.types.is_list(column.type) and pa.types.is_struct(column.type.value_type)):
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>")
    items = column.values  # the whole child; the list's offsets index into it
    fields = items.flatten()  # struct offset and struct nulls applied
    names = [items.type.field(i).name for i in range(items.type.num_fields)]
    if "key" not in names or "value" not in names:
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>")
    keys = binary(fields[names.index("key")], len(items), "headers.key")
    values = binary(fields[names.index("value")], len(items), "headers.value")
    offsets = column.offsets.to_numpy().astype(np.int64)
    h = Headers(_validity(column), offsets, keys, values)
    bad = enc.null_header_key(h.valid, h.off, h.keys.valid, n)
    if bad >= 0:
        raise OptionError(f"row {bad} has a header with a null key")
    return h


@dataclass(frozen=True)
class Marker:
    """A header the sink adds to each row (its ``chronik.sink`` identity), as one binary
    column of values; rows whose value is null get none."""

    key: bytes
    values: Binary


@dataclass
class RowBatch:
    """One Arrow batch's columns, ready for the encoder."""

    n: int
    keys: Binary
    values: Binary
    headers: Headers
    marker: Marker | None = None
    extra_len: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __post_init__(self) -> None:
        if self.marker is None:
            self.extra_len = np.full(self.n, -1, np.int64)
        else:
            m = self.marker.values
            self.extra_len = np.where(m.valid, m.off[1:] - m.off[:-1], -1).astype(np.int64)


def row_batch(rb: pa.RecordBatch, columns: dict[str, pa.Array | None] | None = None,
              marker: Marker | None = None) -> RowBatch:
    """``columns`` replaces batch columns (key and value encoded with a schema)."""
    n = rb.num_rows
    names = rb.schema.names
    cols = {name: rb.column(name) for name in ("key", "value", "headers") if name in names}
    cols.update(columns or {})
    return RowBatch(
        n,
        binary(cols.get("key"), n, "key"),
        binary(cols.get("value"), n, "value"),
        headers(cols.get("headers"), n),
        marker,
    )


def partitions(
    kind: int,
    keys: Binary,
    given: pa.Array | None,
    topic_of: np.ndarray,
    counts: np.ndarray,
    rng: random.Random,
) -> np.ndarray:
    """Each row's partition (the partition column where set, else the partitioner)."""
    n = len(topic_of)
    if given is None or pa.types.is_null(given.type):
        values = np.zeros(n, np.int32)
        valid = np.zeros(n, np.bool_)
    else:
        if not pa.types.is_integer(given.type):
            raise OptionError(f"column 'partition' must be an integer, not {given.type}")
        values = given.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = _validity(given)
        bad = valid & ((values < 0) | (values >= counts[topic_of]))
        if bad.any():
            row = int(np.argmax(bad))
            raise OptionError(
                f"row {row} names partition {int(values[row])}, and its topic has "
                f"{int(counts[topic_of[row]])}"
            )
        values = values.astype(np.int32)
    sticky = np.array([rng.randrange(int(c)) for c in counts], np.int32)
    if kind == enc.RANDOM:  # librdkafka's random: each row on its own
        unset = ~valid
        picked = np.array([rng.randrange(int(c)) for c in counts[topic_of[unset]]], np.int32)
        values = values.copy()
        values[unset] = picked
        valid = np.ones(n, np.bool_)
    return enc.partitions_of(kind, enc.crc_table(), keys.valid, keys.off, keys.data,
                             values, valid, counts.astype(np.int64), sticky, topic_of)


def chunks(rows: np.ndarray, batch: RowBatch, batch_bytes: int, batch_records: int) -> list:
    """``rows`` cut into runs whose records section stays within the limits (a record
    larger than ``batch_bytes`` goes alone)."""
    h = batch.headers
    marker_key = batch.marker.key if batch.marker is not None else b""
    sizes = enc.record_sizes(
        rows, batch.keys.valid, batch.keys.off, batch.values.valid, batch.values.off,
        h.valid, h.off, h.keys.valid, h.keys.off, h.values.valid, h.values.off,
        batch.extra_len, len(marker_key) + (1 if len(marker_key) < 64 else 2),
    )
    if int(sizes.sum()) <= batch_bytes and len(rows) <= batch_records:
        return [rows]
    out = []
    start = 0
    ends = np.cumsum(sizes)
    while start < len(rows):
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + batch_bytes, side="right"))
        stop = min(max(stop, start + 1), start + batch_records)
        out.append(rows[start:stop])
        start = stop
    return out


def records_section(rows: np.ndarray, batch: RowBatch) -> np.ndarray:
    h = batch.headers
    if batch.marker is not None:
        m = batch.marker.values
        extra_key = np.frombuffer(batch.marker.key, np.uint8)
        extra_off, extra_data = m.off, m.data
    else:
        extra_key, extra_off, extra_data = _NO_EXTRA, np.zeros(1, np.int64), _NO_EXTRA
    return enc.encode_records(
        rows,
        batch.keys.valid, batch.keys.off, batch.keys.data,
        batch.values.valid, batch.values.off, batch.values.data,
        h.valid, h.off,
        h.keys.valid, h.keys.off, h.keys.data,
        h.values.valid, h.values.off, h.values.data,
        extra_key, batch.extra_len, extra_off, extra_data,
    )


def record_batch(
    section: np.ndarray,
    count: int,
    timestamp: int,
    codec: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """A record batch v2 around a records section of ``count`` records, all stamped
    ``timestamp`` (CreateTime)."""
    body = compress(codec, section)
    buf = bytearray(HEADER.size + len(body))
    buf[HEADER.size :] = memoryview(body)
    attributes = codec | (TRANSACTIONAL_BIT if transactional else 0)
    HEADER.pack_into(
        buf, 0, 0, len(buf) - LOG_OVERHEAD, -1, 2, 0, attributes, count - 1, timestamp,
        timestamp, producer_id, producer_epoch, base_sequence, count,
    )
    _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)
