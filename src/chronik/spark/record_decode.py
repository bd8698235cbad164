# Record batch v2 decoded straight into column arrays, compiled with numba.
#
# A fetched records blob is a run of batches: a 61-byte big-endian header (layout in
# chronik.records.batch) and a records section, compressed as a whole when the attributes say
# so. Each record of a section:
#   length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
#   keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
#   headerCount varint, then per header keyLength varint, key, valueLength varint, value.
# Varints are zigzag-encoded, as in protobuf.
#
# scan_batches walks the headers; decode_sections turns sections into per-record offsets,
# timestamps and (position, length) pairs of keys, values and headers; gather copies those
# slices into the contiguous data + int32 offsets buffers of an Arrow binary column. Every
# read is bounds-checked: a corrupt section yields an error index, never a read past its end.
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

HEADER_SIZE = 61


def _compiled(fn: Callable) -> Any:
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # source inside a zip (spark-submit --py-files): compile, no cache
        return numba.njit(nogil=True)(fn)


@_compiled
def _int(buf: np.ndarray, pos: int, size: int) -> int:
    value = np.int64(0)
    for i in range(size):
        value = (value << 8) | np.int64(buf[pos + i])
    if size < 8 and value >= (np.int64(1) << (8 * size - 1)):
        value -= np.int64(1) << (8 * size)
    return value


@_compiled
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it); position -1 when the varint runs past ``end``."""
    raw = np.uint64(0)
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return 0, -1
        byte = buf[pos]
        pos += 1
        raw |= np.uint64(byte & 0x7F) << np.uint64(shift)
        if byte < 0x80:
            break
        shift += 7
    value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
    return value, pos


@_compiled
def scan_batches(buf: np.ndarray, start: int, end: int) -> tuple:
    """Headers of the whole batches in buf[start:end], and whether the walk stopped at a
    length no message format allows. A partial batch at the end is left out (a fetch response
    may cut its last batch short). Older formats (magic 0/1, same offset/length/magic
    positions) are listed with only offset, size and magic filled in."""
    cap = 64
    pos_a = np.empty(cap, np.int64)
    fields = np.zeros((cap, 8), np.int64)
    n = 0
    pos = start
    bad = False
    while pos + 17 <= end:
        length = _int(buf, pos + 8, 4)
        size = length + 12
        if length < 14:
            bad = True
            break
        if pos + size > end:
            break
        if n == cap:
            cap *= 2
            grown = np.empty(cap, np.int64)
            grown[:n] = pos_a[:n]
            pos_a = grown
            grown_f = np.zeros((cap, 8), np.int64)
            grown_f[:n] = fields[:n]
            fields = grown_f
        pos_a[n] = pos
        fields[n, 0] = _int(buf, pos, 8)  # base offset
        fields[n, 1] = size
        fields[n, 2] = buf[pos + 16]  # magic
        if buf[pos + 16] == 2 and size >= HEADER_SIZE:
            fields[n, 3] = _int(buf, pos + 21, 2)  # attributes
            fields[n, 4] = _int(buf, pos + 23, 4)  # last offset delta
            fields[n, 5] = _int(buf, pos + 27, 8)  # base timestamp
            fields[n, 6] = _int(buf, pos + 35, 8)  # max timestamp
            fields[n, 7] = _int(buf, pos + 57, 4)  # records count
        n += 1
        pos += size
    return pos_a[:n], fields[:n], bad


@_compiled
def decode_sections(
    buf: np.ndarray,
    sec_start: np.ndarray,
    sec_end: np.ndarray,
    sec_count: np.ndarray,
    base_offset: np.ndarray,
    base_ts: np.ndarray,
    log_append_ts: np.ndarray,
    log_append: np.ndarray,
    lo: int,
    hi: int,
    want_headers: bool,
) -> tuple:
    """Records with lo <= offset < hi. The last value returned is -1, or the index of the
    first section that is corrupt."""
    total = 0
    for s in range(len(sec_count)):
        total += max(sec_count[s], 0)
    offsets = np.empty(total, np.int64)
    stamps = np.empty(total, np.int64)
    ts_type = np.empty(total, np.int32)
    kpos = np.empty(total, np.int64)
    klen = np.empty(total, np.int64)
    vpos = np.empty(total, np.int64)
    vlen = np.empty(total, np.int64)
    hfirst = np.zeros(total + 1, np.int64)
    hcap = 16
    hk = np.empty((hcap, 4), np.int64)  # key pos, key len, value pos, value len
    n = 0
    nh = 0
    bad = -1
    for s in range(len(sec_start)):
        pos = sec_start[s]
        end = sec_end[s]
        for _ in range(sec_count[s]):
            bad = s  # until the record is read whole
            length, pos = _varint(buf, pos, end)
            if pos < 0 or length < 0 or pos + length > end:
                break
            rec_end = pos + length
            pos += 1  # attributes, unused
            ts_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                break
            off_delta, pos = _varint(buf, pos, rec_end)
            if pos < 0:
                break
            key_len, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(key_len, 0) > rec_end or key_len < -1:
                break
            key_pos = pos
            pos += max(key_len, 0)
            value_len, pos = _varint(buf, pos, rec_end)
            if pos < 0 or pos + max(value_len, 0) > rec_end or value_len < -1:
                break
            value_pos = pos
            pos += max(value_len, 0)
            offset = base_offset[s] + off_delta
            bad = -1
            if offset < lo or offset >= hi:
                pos = rec_end
                continue
            offsets[n] = offset
            if log_append[s]:
                stamps[n] = log_append_ts[s]
                ts_type[n] = 1
            else:
                stamps[n] = base_ts[s] + ts_delta
                ts_type[n] = 0
            kpos[n] = key_pos
            klen[n] = key_len
            vpos[n] = value_pos
            vlen[n] = value_len
            if want_headers:
                bad = s
                count, pos = _varint(buf, pos, rec_end)
                if pos < 0 or count < 0:
                    break
                read = 0
                for _h in range(count):
                    hkey_len, pos = _varint(buf, pos, rec_end)
                    if pos < 0 or hkey_len < 0 or pos + hkey_len > rec_end:
                        break
                    hkey_pos = pos
                    pos += hkey_len
                    hval_len, pos = _varint(buf, pos, rec_end)
                    if pos < 0 or hval_len < -1 or pos + max(hval_len, 0) > rec_end:
                        break
                    if nh == hcap:
                        hcap *= 2
                        grown = np.empty((hcap, 4), np.int64)
                        grown[:nh] = hk[:nh]
                        hk = grown
                    hk[nh, 0] = hkey_pos
                    hk[nh, 1] = hkey_len
                    hk[nh, 2] = pos
                    hk[nh, 3] = hval_len
                    nh += 1
                    pos += max(hval_len, 0)
                    read += 1
                if read < count:
                    break
                bad = -1
            n += 1
            hfirst[n] = nh
            pos = rec_end
        if bad >= 0:
            break
    return n, offsets, stamps, ts_type, kpos, klen, vpos, vlen, hfirst, hk[:nh], bad


@_compiled
def gather(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> tuple:
    """Arrow binary buffers for the slices buf[pos[i]:pos[i]+lens[i]] (len -1 = null)."""
    n = len(pos)
    offsets = np.empty(n + 1, np.int32)
    total = 0
    for i in range(n):
        offsets[i] = total
        if lens[i] > 0:
            total += lens[i]
    offsets[n] = total
    data = np.empty(total, np.uint8)
    for i in range(n):
        size = lens[i]
        if size > 0:
            at = offsets[i]
            src = pos[i]
            for j in range(size):
                data[at + j] = buf[src + j]
    return offsets, data
