# Arrow columns encoded straight into the records section of a record batch v2, compiled
# with numba: the sink's counterpart of record_decode.
#
# Each record of a section (chronik.records.builder writes the same bytes one record at a
# time):
#   length varint, attributes int8 (0), timestampDelta varlong, offsetDelta varint,
#   keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
#   headerCount varint, then per header keyLength varint, key (UTF-8), valueLength varint
#   (-1 = null), value.
# Varints are zigzag-encoded, as in protobuf.
#
# A binary column comes in as Arrow lays it out: int64 offsets (n + 1, positions in data),
# the data bytes and a validity mask. Headers, Spark's array<struct<key, value>>, come as
# the list's offsets and validity plus their key and value columns. Rows are picked by
# index, so one pass over an Arrow batch serves each partition's rows in their order.
# Partitioners (librdkafka's, which the sink used through confluent-kafka: CRC-32 of the
# key for consistent*, Java's murmur2 for murmur2*) run here too, one loop per batch.
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np


def _compiled(fn: Callable) -> Any:
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # source inside a zip (spark-submit --py-files): compile, no cache
        return numba.njit(nogil=True)(fn)


def _inline(fn: Callable) -> Any:
    """A helper inlined into its callers by numba itself: a call between compiled functions
    takes and drops a reference to each array passed (atomic operations), which cost more
    than the helpers' work."""
    return numba.njit(inline="always", nogil=True)(fn)


@_inline
def _varint_size(value: int) -> int:
    z = (np.int64(value) << np.int64(1)) ^ (np.int64(value) >> np.int64(63))
    u = np.uint64(z)
    size = 1
    while u > np.uint64(0x7F):
        u >>= np.uint64(7)
        size += 1
    return size


@_inline
def _put_varint(out: np.ndarray, pos: int, value: int) -> int:
    z = (np.int64(value) << np.int64(1)) ^ (np.int64(value) >> np.int64(63))
    u = np.uint64(z)
    while u > np.uint64(0x7F):
        out[pos] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        pos += 1
        u >>= np.uint64(7)
    out[pos] = np.uint8(u)
    return pos + 1


@_inline
def _put_nullable(
    out: np.ndarray, pos: int, valid: bool, offsets: np.ndarray, data: np.ndarray, i: int
) -> int:
    """Item ``i`` of an Arrow binary column as a record field: varint length and bytes,
    or varint -1 for null."""
    if not valid:
        out[pos] = 1  # varint -1
        return pos + 1
    start = offsets[i]
    length = offsets[i + 1] - start
    pos = _put_varint(out, pos, length)
    for j in range(length):
        out[pos + j] = data[start + j]
    return pos + length


@_inline
def _field_size(valid: np.ndarray, off: np.ndarray, row: int) -> int:
    if not valid[row]:
        return 1  # varint -1
    length = off[row + 1] - off[row]
    return _varint_size(length) + length


@_compiled
def record_sizes(
    rows: np.ndarray,
    kvalid: np.ndarray, koff: np.ndarray,
    vvalid: np.ndarray, voff: np.ndarray,
    hvalid: np.ndarray, hoff: np.ndarray,
    hkvalid: np.ndarray, hkoff: np.ndarray,
    hvvalid: np.ndarray, hvoff: np.ndarray,
    extra_len: np.ndarray, extra_key_size: int,
) -> np.ndarray:
    """Encoded size of each picked row as the i-th record of a batch (length varint
    included): an upper bound of its size at any smaller offset delta. ``extra_len[row]``
    >= 0 adds a header named by the caller (the sink's row marker; its key takes
    ``extra_key_size`` bytes with its length) of that many value bytes; -1 adds none.
    The helpers are spelled out here, not called: numba's calls between functions cost
    more than this loop's work."""
    sizes = np.empty(len(rows), np.int64)
    for i in range(len(rows)):
        row = rows[i]
        body = 2 + _varint_size(i)  # attributes, timestampDelta 0, offsetDelta
        body += _field_size(kvalid, koff, row) + _field_size(vvalid, voff, row)
        count = 0
        if hvalid[row]:
            for h in range(hoff[row], hoff[row + 1]):
                body += _field_size(hkvalid, hkoff, h) + _field_size(hvvalid, hvoff, h)
                count += 1
        extra = extra_len[row]
        if extra >= 0:
            body += extra_key_size + _varint_size(extra) + extra
            count += 1
        body += _varint_size(count)
        sizes[i] = _varint_size(body) + body
    return sizes


@_compiled
def encode_records(
    rows: np.ndarray,
    kvalid: np.ndarray, koff: np.ndarray, kdata: np.ndarray,
    vvalid: np.ndarray, voff: np.ndarray, vdata: np.ndarray,
    hvalid: np.ndarray, hoff: np.ndarray,
    hkvalid: np.ndarray, hkoff: np.ndarray, hkdata: np.ndarray,
    hvvalid: np.ndarray, hvoff: np.ndarray, hvdata: np.ndarray,
    extra_key: np.ndarray, extra_len: np.ndarray, extra_off: np.ndarray, extra_data: np.ndarray,
) -> np.ndarray:
    """The records section for the picked rows, offset deltas 0.., timestamp deltas 0. A
    header key is never null here (the caller refuses such rows first)."""
    n = len(rows)
    extra_key_size = _varint_size(len(extra_key)) + len(extra_key)
    sizes = record_sizes(rows, kvalid, koff, vvalid, voff, hvalid, hoff, hkvalid, hkoff,
                         hvvalid, hvoff, extra_len, extra_key_size)
    total = 0
    for i in range(n):
        total += sizes[i]
    out = np.empty(total, np.uint8)
    pos = 0
    for i in range(n):
        row = rows[i]
        body = sizes[i] - 1  # sizes holds the length varint and the body
        while _varint_size(body) + body != sizes[i]:
            body -= 1
        pos = _put_varint(out, pos, body)
        out[pos] = 0  # attributes
        out[pos + 1] = 0  # timestampDelta 0
        pos = _put_varint(out, pos + 2, i)
        pos = _put_nullable(out, pos, kvalid[row], koff, kdata, row)
        pos = _put_nullable(out, pos, vvalid[row], voff, vdata, row)
        count = hoff[row + 1] - hoff[row] if hvalid[row] else 0
        extra = extra_len[row]
        pos = _put_varint(out, pos, count + (1 if extra >= 0 else 0))
        if count:
            for h in range(hoff[row], hoff[row + 1]):
                start = hkoff[h]
                length = hkoff[h + 1] - start
                pos = _put_varint(out, pos, length)
                for j in range(length):
                    out[pos + j] = hkdata[start + j]
                pos += length
                pos = _put_nullable(out, pos, hvvalid[h], hvoff, hvdata, h)
        if extra >= 0:
            pos = _put_varint(out, pos, len(extra_key))
            for j in range(len(extra_key)):
                out[pos + j] = extra_key[j]
            pos += len(extra_key)
            pos = _put_varint(out, pos, extra)
            start = extra_off[row]
            for j in range(extra):
                out[pos + j] = extra_data[start + j]
            pos += extra
    return out


@_compiled
def null_header_key(
    hvalid: np.ndarray, hoff: np.ndarray, hkvalid: np.ndarray, n: int
) -> int:
    """The first row with a header whose key is null, or -1."""
    for row in range(n):
        if hvalid[row]:
            for h in range(hoff[row], hoff[row + 1]):
                if not hkvalid[h]:
                    return row
    return -1


def _crc_table() -> np.ndarray:
    table = np.empty(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[i] = c
    return table


_CRC_TABLE = _crc_table()


@_inline
def _crc32(table: np.ndarray, data: np.ndarray, start: int, end: int) -> int:
    """zlib's CRC-32 (librdkafka's rd_crc32)."""
    crc = np.uint32(0xFFFFFFFF)
    for i in range(start, end):
        crc = table[(crc ^ np.uint32(data[i])) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return np.int64(crc ^ np.uint32(0xFFFFFFFF))


@_inline
def _murmur2(data: np.ndarray, start: int, end: int) -> int:
    """Java's Utils.murmur2 (chronik.records.partitioner.murmur2), unsigned 32 bits. In
    int64 with explicit masks: numba widens uint32 arithmetic."""
    m = np.int64(0x5BD1E995)
    mask = np.int64(0xFFFFFFFF)
    length = end - start
    h = (np.int64(0x9747B28C) ^ np.int64(length)) & mask
    whole = length & ~3
    for i in range(0, whole, 4):
        p = start + i
        k = (np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
             | (np.int64(data[p + 2]) << 16) | (np.int64(data[p + 3]) << 24))
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length & 3
    if rest == 3:
        h ^= np.int64(data[start + whole + 2]) << 16
    if rest >= 2:
        h ^= np.int64(data[start + whole + 1]) << 8
    if rest >= 1:
        h ^= np.int64(data[start + whole])
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


# Partitioner kinds (librdkafka's `partitioner` values).
CONSISTENT_RANDOM, CONSISTENT, MURMUR2_RANDOM, MURMUR2, RANDOM = range(5)
KINDS = {
    "consistent_random": CONSISTENT_RANDOM,
    "consistent": CONSISTENT,
    "murmur2_random": MURMUR2_RANDOM,
    "murmur2": MURMUR2,
    "random": RANDOM,
}


@_inline
def _pick(
    kind: int, table: np.ndarray, kvalid: np.ndarray, koff: np.ndarray, kdata: np.ndarray,
    row: int, count: int,
) -> int:
    """The partition of a keyed row, or -1 where the partitioner picks at random."""
    if kind == 4:
        return -1
    start = koff[row]
    end = koff[row + 1] if kvalid[row] else start
    if kind <= 1:
        if kind == 0 and end == start:  # consistent_random: empty and null keys at random
            return -1
        return _crc32(table, kdata, start, end) % count
    if kind == 2 and not kvalid[row]:  # murmur2_random: null keys at random
        return -1
    return (_murmur2(kdata, start, end) & 0x7FFFFFFF) % count


@_compiled
def partitions_of(
    kind: int,
    table: np.ndarray,
    kvalid: np.ndarray, koff: np.ndarray, kdata: np.ndarray,
    given: np.ndarray, given_valid: np.ndarray,
    counts: np.ndarray, sticky: np.ndarray, topic_of: np.ndarray,
) -> np.ndarray:
    """Each row's partition: the ``partition`` column where set, else the partitioner's
    over its topic's ``counts``; rows it leaves to chance go to their topic's ``sticky``
    partition (one per batch, as librdkafka's sticky partitioner does within its linger)."""
    n = len(topic_of)
    out = np.empty(n, np.int32)
    for row in range(n):
        t = topic_of[row]
        if given_valid[row]:
            out[row] = given[row]
            continue
        p = _pick(kind, table, kvalid, koff, kdata, row, counts[t])
        out[row] = sticky[t] if p < 0 else p
    return out


def crc_table() -> np.ndarray:
    return _CRC_TABLE
