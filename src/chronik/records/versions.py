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
# Stamping rebuilds the records section (chronik.records.stamping, the per-record loop),
# recompresses it with the batch's codec and recomputes the CRC. Records without a key
# carry no version (a client's chronik-version header is dropped from them too).
from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple

from crc32c import crc32c

from chronik.records import compiled, stamping
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
from chronik.records.stamping import EXPECTED_HEADER, VERSION_HEADER, key_text, parse_version

__all__ = [
    "EXPECTED_HEADER", "VERSION_HEADER", "Stamped", "VersionError", "header_version",
    "key_text", "parse_version", "stamp_versions",
]


class VersionError(InvalidBatch):
    """A batch refused by the version checks (a conflict, a bad expected version, a
    transactional batch). Answered as INVALID_RECORD on every Produce version: unlike other
    INVALID_RECORD refusals it is not mapped to CORRUPT_MESSAGE below v8, which clients
    retry."""

    def code_for(self, produce_version: int) -> int:
        return self.code


class Stamped(NamedTuple):
    batch: bytearray
    header: BatchHeader
    # Key, version and offset delta of each keyed record, in batch order, in one flat list.
    versions: list[bytes | int]
    # Each key's version count once the batch is appended.
    counts: dict[bytes, int]


def stamping_source() -> ModuleType:
    """chronik.records.stamping's source run interpreted, whether or not it is compiled."""
    return compiled.source_of(stamping)


is_compiled = compiled.is_compiled


stamp_records = compiled.current(stamping).stamp_records


def header_version(record: DecodedRecord) -> int | None:
    """The chronik-version a stored record carries (the last one, if several), or None."""
    found = None
    for name, value in record.headers:
        if name == VERSION_HEADER:
            found = parse_version(value)
    return found


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
        parts, versions, failures, counts = stamp_records(body, header.records_count, count)
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
    return Stamped(new, read_header(new), versions, counts)
