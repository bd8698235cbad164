# Per-key versions stamped into record batches (topics with key.versioning.enable).
#
# Two record headers, values ASCII decimal:
#   chronik-version           set by the broker on every keyed record it appends: how many
#                             records with that key came before it in the partition (0 for
#                             the first). One sent by a client is dropped and replaced.
#   chronik-expected-version  set by a client: append the record only if its key has exactly
#                             that many records already, the earlier records of the same
#                             batch counted (0: the key must not exist yet).
#
# Stamping rebuilds the records section: each record keeps its bytes up to the end of its
# value, then its headers minus any chronik-version, then the broker's chronik-version; the
# section is recompressed with the batch's codec and the CRC recomputed. Records without a
# key carry no version (a client's chronik-version header is dropped from them too).
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from crc32c import crc32c

from chronik.records import compression as codecs
from chronik.records.batch import (
    CORRUPT_MESSAGE,
    CRC_START,
    HEADER_SIZE,
    INVALID_RECORD,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    read_header,
)
from chronik.records.reader import DecodedRecord
from chronik.records.varint import write_varint

VERSION_HEADER = "chronik-version"
EXPECTED_HEADER = "chronik-expected-version"
_VERSION_KEY = VERSION_HEADER.encode()
_EXPECTED_KEY = EXPECTED_HEADER.encode()
# The encoded header key of chronik-version (length varint + bytes), written once per record.
_VERSION_KEY_FIELD = bytes([len(_VERSION_KEY) << 1]) + _VERSION_KEY
_MAX_VERSION_DIGITS = 18


class VersionError(InvalidBatch):
    """A batch refused by the version checks (a conflict, a bad expected version, a
    transactional batch). Answered as INVALID_RECORD on every Produce version: unlike other
    INVALID_RECORD refusals it is not mapped to CORRUPT_MESSAGE below v8, which clients
    retry."""


class Stamped(NamedTuple):
    batch: bytearray
    header: BatchHeader
    # (key, version, offset delta) of each keyed record, in batch order.
    versions: list[tuple[bytes, int, int]]


def key_text(key: bytes) -> str:
    """A key as an error message names it: quoted UTF-8 if printable, else hex."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()
    if text.isprintable():
        return repr(text)
    return "0x" + key.hex()


def parse_version(value: bytes | None) -> int | None:
    """A header value as a non-negative decimal, or None if it is not one."""
    if value is None or not 0 < len(value) <= _MAX_VERSION_DIGITS or not value.isdigit():
        return None
    return int(value)


def header_version(record: DecodedRecord) -> int | None:
    """The chronik-version a stored record carries (the last one, if several), or None."""
    found = None
    for name, value in record.headers:
        if name == VERSION_HEADER:
            found = parse_version(value)
    return found


def _zigzag(body: bytes, pos: int) -> tuple[int, int]:
    """(raw zig-zag value, next position) of a varint of more than one byte."""
    z = 0
    shift = 0
    while True:
        if shift > 63:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: malformed varint")
        b = body[pos]  # IndexError past the end: the caller's CORRUPT_MESSAGE
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return z, pos
        shift += 7


def _length_bytes(n: int) -> bytes:
    """The varint of a non-negative ``n``."""
    z = n << 1
    if z < 0x80:
        return _ONE_BYTE[z]
    if z < 0x4000:
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def _version_field(version: int) -> bytes:
    """The encoded chronik-version header (key and value fields) for ``version``."""
    digits = str(version).encode()
    return _VERSION_KEY_FIELD + _ONE_BYTE[len(digits) << 1] + digits


# The header fields of the versions most records get, made once.
_VERSION_FIELDS = [_version_field(v) for v in range(1024)]
_EXPECTED_LEN = len(_EXPECTED_KEY)
_VERSION_LEN = len(_VERSION_KEY)


def stamp_versions(
    batch: bytearray, header: BatchHeader, count: Callable[[bytes], int]
) -> Stamped:
    """The batch with a chronik-version header on each keyed record, ``count(key)`` giving
    how many records the key has before this batch. Raises VersionError naming every record
    whose chronik-expected-version does not hold (nothing of the batch is to be written),
    InvalidBatch(CORRUPT_MESSAGE) for records that cannot be decoded."""
    if header.is_transactional:
        raise VersionError(
            INVALID_RECORD,
            "transactional produce to a topic with key.versioning.enable is not supported",
        )
    codec = header.compression
    if codec:
        try:
            body = bytes(codecs.decompress(codec, memoryview(batch)[HEADER_SIZE : header.size]))
        except Exception as exc:  # cramjam's DecompressionError: the client sent junk
            raise InvalidBatch(CORRUPT_MESSAGE, f"cannot decompress the records: {exc}") from None
    else:
        body = bytes(memoryview(batch)[HEADER_SIZE : header.size])
    try:
        parts, versions, failures = _stamp_records(body, header.records_count, count)
    except IndexError:
        raise InvalidBatch(
            CORRUPT_MESSAGE, "malformed records: a field runs past its batch"
        ) from None
    if failures:
        first = failures[0][1]
        message = first if len(failures) == 1 else f"{first} (and {len(failures) - 1} more)"
        raise VersionError(INVALID_RECORD, message, tuple(failures))
    if codec:
        new = bytearray(batch[:HEADER_SIZE])
        new += codecs.compress(codec, b"".join(parts))
    else:
        parts[0] = batch[:HEADER_SIZE]
        new = bytearray().join(parts)
    struct.pack_into(">i", new, 8, len(new) - LOG_OVERHEAD)
    struct.pack_into(">I", new, 17, crc32c(memoryview(new)[CRC_START:]))
    return Stamped(new, read_header(new), versions)


def _stamp_records(
    body: bytes, records_count: int, count: Callable[[bytes], int]
) -> tuple[list[bytes], list[tuple[bytes, int, int]], list[tuple[int, str]]]:
    """The stamped records section as slices to join (the first left empty for the
    caller), the (key, version, offset delta) of keyed records and the failed checks.
    Varints of one or two bytes (nearly all of them) are decoded inline; IndexError means
    a field runs past the section."""
    parts: list[bytes] = [b""]
    add = parts.append
    pending: dict[bytes, int] = {}
    versions: list[tuple[bytes, int, int]] = []
    failures: list[tuple[int, str]] = []
    fields = _VERSION_FIELDS
    one = _ONE_BYTE
    pos = 0
    size = len(body)
    for index in range(records_count):
        rec_at = pos
        # record length
        z = body[pos]
        if z < 0x80:
            pos += 1
        elif body[pos + 1] < 0x80:
            z = (z & 0x7F) | (body[pos + 1] << 7)
            pos += 2
        else:
            z, pos = _zigzag(body, pos)
        length = (z >> 1) ^ -(z & 1)
        end = pos + length
        if length < 1 or end > size:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a record runs past its batch")
        start = pos
        field = pos + 1  # attributes
        # timestamp delta: skipped
        if body[field] < 0x80:
            field += 1
        elif body[field + 1] < 0x80:
            field += 2
        else:
            _, field = _zigzag(body, field)
        # offset delta
        z = body[field]
        if z < 0x80:
            field += 1
        elif body[field + 1] < 0x80:
            z = (z & 0x7F) | (body[field + 1] << 7)
            field += 2
        else:
            z, field = _zigzag(body, field)
        offset_delta = (z >> 1) ^ -(z & 1)
        # key
        z = body[field]
        if z < 0x80:
            field += 1
        elif body[field + 1] < 0x80:
            z = (z & 0x7F) | (body[field + 1] << 7)
            field += 2
        else:
            z, field = _zigzag(body, field)
        key_len = (z >> 1) ^ -(z & 1)
        key_at = field
        if key_len > 0:
            field += key_len
        # value
        z = body[field]
        if z < 0x80:
            field += 1
        elif body[field + 1] < 0x80:
            z = (z & 0x7F) | (body[field + 1] << 7)
            field += 2
        else:
            z, field = _zigzag(body, field)
        value_len = (z >> 1) ^ -(z & 1)
        if value_len > 0:
            field += value_len
        if field > end:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a field runs past its record")
        fixed_end = field
        z = body[field]
        if z < 0x80:
            field += 1
        elif body[field + 1] < 0x80:
            z = (z & 0x7F) | (body[field + 1] << 7)
            field += 2
        else:
            z, field = _zigzag(body, field)
        count_headers = (z >> 1) ^ -(z & 1)
        if count_headers < 0:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: negative header count")
        headers_at = field
        dropped: list[tuple[int, int]] | None = None
        expected: bytes | None = None
        has_expected = False
        for _ in range(count_headers):
            h_start = field
            z = body[field]
            if z < 0x80:
                field += 1
            elif body[field + 1] < 0x80:
                z = (z & 0x7F) | (body[field + 1] << 7)
                field += 2
            else:
                z, field = _zigzag(body, field)
            name_len = (z >> 1) ^ -(z & 1)
            name_at = field
            if name_len > 0:
                field += name_len
            z = body[field]
            if z < 0x80:
                field += 1
            elif body[field + 1] < 0x80:
                z = (z & 0x7F) | (body[field + 1] << 7)
                field += 2
            else:
                z, field = _zigzag(body, field)
            value_len = (z >> 1) ^ -(z & 1)
            value_at = field
            if value_len > 0:
                field += value_len
            if field > end:
                raise InvalidBatch(
                    CORRUPT_MESSAGE, "malformed records: a field runs past its record"
                )
            if name_len == _VERSION_LEN and body.startswith(_VERSION_KEY, name_at):
                if dropped is None:
                    dropped = []
                dropped.append((h_start, field))  # never trusted from a client
            elif name_len == _EXPECTED_LEN and body.startswith(_EXPECTED_KEY, name_at):
                has_expected = True
                expected = body[value_at : value_at + value_len] if value_len >= 0 else None
        if field != end:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: record length mismatch")
        if key_len >= 0:
            key = body[key_at : key_at + key_len]
            current = pending.get(key)
            if current is None:
                current = count(key)
            if has_expected:
                wanted = parse_version(expected)
                if wanted is None:
                    failures.append(
                        (index, f"bad {EXPECTED_HEADER} on key {key_text(key)}: {expected!r} "
                         "is not a non-negative integer")
                    )
                elif wanted != current:
                    failures.append(
                        (index, f"version conflict on key {key_text(key)}: "
                         f"expected {wanted}, actual {current}")
                    )
            pending[key] = current + 1
            versions.append((key, current, offset_delta))
            vfield = fields[current] if current < 1024 else _version_field(current)
            if dropped is None:
                # The common record: its bytes up to the header count, the count plus one,
                # its headers as they are, the version.
                n = count_headers + 1
                count_bytes = one[n << 1] if n < 64 else _length_bytes(n)
                z = (fixed_end - start + len(count_bytes) + end - headers_at + len(vfield)) << 1
                if z < 0x4000:
                    add(one[z] if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7)))
                else:
                    add(_length_bytes(z >> 1))
                add(body[start:fixed_end])
                add(count_bytes)
                add(body[headers_at:end])
                add(vfield)
                pos = end
                continue
        else:
            if has_expected:
                failures.append((index, f"{EXPECTED_HEADER} on a record without a key"))
            if dropped is None:
                add(body[rec_at:end])
                pos = end
                continue
            vfield = b""
        # Headers to drop: the fixed part, the kept headers, the version if keyed.
        kept = count_headers - len(dropped)
        rec = [body[start:fixed_end], _length_bytes(kept + (len(vfield) > 0))]
        at = headers_at
        for d_start, d_end in dropped:
            rec.append(body[at:d_start])
            at = d_end
        rec.append(body[at:end])
        rec.append(vfield)
        out = b"".join(rec)
        add(_length_bytes(len(out)))
        add(out)
        pos = end
    return parts, versions, failures
