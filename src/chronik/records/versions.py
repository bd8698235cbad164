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
from chronik.records.varint import read_varint, write_varint

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


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    try:
        return read_varint(view, pos)
    except ValueError as exc:
        raise InvalidBatch(CORRUPT_MESSAGE, f"malformed records: {exc}") from None


def _field(view: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """(start, length, next position) of a length-prefixed field; length -1 = null."""
    length, pos = _varint(view, pos)
    if length < 0:
        return pos, -1, pos
    if pos + length > end:
        raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a field runs past its record")
    return pos, length, pos + length


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
    body = memoryview(batch)[HEADER_SIZE : header.size]
    if codec:
        try:
            body = memoryview(codecs.decompress(codec, body))
        except Exception as exc:  # cramjam's DecompressionError: the client sent junk
            raise InvalidBatch(CORRUPT_MESSAGE, f"cannot decompress the records: {exc}") from None
    out = bytearray()
    rec = bytearray()
    pending: dict[bytes, int] = {}
    versions: list[tuple[bytes, int, int]] = []
    failures: list[tuple[int, str]] = []
    pos = 0
    size = len(body)
    for index in range(header.records_count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 1 or end > size:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: a record runs past its batch")
        start = pos
        field = pos + 1  # attributes
        _, field = _varint(body, field)  # timestamp delta
        offset_delta, field = _varint(body, field)
        key_at, key_len, field = _field(body, field, end)
        _, _, field = _field(body, field, end)  # value
        fixed_end = field
        count_headers, field = _varint(body, field)
        if count_headers < 0:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: negative header count")
        kept: list[tuple[int, int]] = []
        expected: bytes | None = None
        has_expected = False
        for _ in range(count_headers):
            h_start = field
            name_at, name_len, field = _field(body, field, end)
            value_at, value_len, field = _field(body, field, end)
            name = body[name_at : name_at + name_len] if name_len > 0 else b""
            if name == _VERSION_KEY:
                continue  # never trusted from a client
            if name == _EXPECTED_KEY:
                has_expected = True
                expected = bytes(body[value_at : value_at + value_len]) if value_len >= 0 else None
            kept.append((h_start, field))
        if field != end:
            raise InvalidBatch(CORRUPT_MESSAGE, "malformed records: record length mismatch")
        version = None
        if key_len >= 0:
            key = bytes(body[key_at : key_at + key_len])
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
            version = current
            pending[key] = current + 1
            versions.append((key, current, offset_delta))
        elif has_expected:
            failures.append((index, f"{EXPECTED_HEADER} on a record without a key"))
        # Rebuild the record: its fixed part, the kept headers, the version.
        rec.clear()
        rec += body[start:fixed_end]
        write_varint(rec, len(kept) + (version is not None))
        for h_start, h_end in kept:
            rec += body[h_start:h_end]
        if version is not None:
            digits = str(version).encode()
            rec += _VERSION_KEY_FIELD
            write_varint(rec, len(digits))
            rec += digits
        write_varint(out, len(rec))
        out += rec
        pos = end
    if failures:
        first = failures[0][1]
        message = first if len(failures) == 1 else f"{first} (and {len(failures) - 1} more)"
        raise VersionError(INVALID_RECORD, message, tuple(failures))
    packed = codecs.compress(codec, out) if codec else out
    new = bytearray(HEADER_SIZE + len(packed))
    new[:HEADER_SIZE] = batch[:HEADER_SIZE]
    new[HEADER_SIZE:] = packed
    struct.pack_into(">i", new, 8, len(new) - LOG_OVERHEAD)
    struct.pack_into(">I", new, 17, crc32c(memoryview(new)[CRC_START:]))
    return Stamped(new, read_header(new), versions)
