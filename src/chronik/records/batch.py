# Record batch v2, the unit the broker stores and serves. Big-endian header, 61 bytes:
#
#   0 baseOffset int64        8 batchLength int32 (bytes after this field)
#  12 partitionLeaderEpoch int32  16 magic int8 (= 2)   17 crc uint32 (CRC-32C of 21..end)
#  21 attributes int16       23 lastOffsetDelta int32   27 baseTimestamp int64
#  35 maxTimestamp int64     43 producerId int64        51 producerEpoch int16
#  53 baseSequence int32     57 recordsCount int32      61 records...
#
# attributes: bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
# bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional, bit 5 control.
#
# The broker never decodes the records on the hot path: it checks the header and
# the CRC, then rewrites baseOffset (outside the CRC) in place.
from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
CRC_START = 21
BASE_OFFSET = struct.Struct(">q")
LENGTH_PREFIX = struct.Struct(">qi")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# Kafka error codes raised by validation.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 2**31


MAX_CODEC = 4  # zstd; codec bits 5-7 name no codec


class InvalidBatch(Exception):
    """A batch that must not be stored; ``code`` is the Kafka error code to answer with,
    ``record_errors`` the (index in the batch, message) of the records at fault, if known."""

    def __init__(
        self, code: int, message: str, record_errors: tuple[tuple[int, str | None], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.record_errors = record_errors

    def code_for(self, produce_version: int) -> int:
        """The code a Produce of ``produce_version`` is answered with: below v8 (no
        per-record errors yet) Kafka's broker answers INVALID_RECORD as CORRUPT_MESSAGE."""
        if self.code == INVALID_RECORD and produce_version < 8:
            return CORRUPT_MESSAGE
        return self.code


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, position))


def validate_produced(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> BatchHeader:
    """Check one batch as a client sent it in a produce request.

    A produce request carries exactly one batch per partition (Kafka's rule since
    Produce v3), with baseOffset 0 and a valid CRC; the broker assigns offsets.
    """
    size = len(buf)
    if size < HEADER_SIZE:
        raise InvalidBatch(
            CORRUPT_MESSAGE, f"record set of {size} bytes is shorter than a batch header"
        )
    header = read_header(buf)
    if header.magic != 2:
        raise InvalidBatch(CORRUPT_MESSAGE, f"unsupported record batch magic {header.magic}")
    # Once per produced batch: the header's properties are spelled out.
    batch_size = header.batch_length + LOG_OVERHEAD
    if batch_size != size:
        if batch_size < size:
            raise InvalidBatch(
                INVALID_RECORD,
                "a produce request must carry exactly one record batch per partition",
            )
        raise InvalidBatch(
            CORRUPT_MESSAGE, f"batch length {batch_size} exceeds the {size} bytes sent"
        )
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch length {header.batch_length} is too small")
    if size > max_batch_bytes:
        raise InvalidBatch(
            MESSAGE_TOO_LARGE,
            f"batch of {size} bytes is larger than the limit of {max_batch_bytes}",
        )
    if crc32c(memoryview(buf)[CRC_START:]) != header.crc:
        raise InvalidBatch(CORRUPT_MESSAGE, "record batch CRC-32C does not match")
    if header.base_offset != 0:
        raise InvalidBatch(INVALID_RECORD, f"batch baseOffset must be 0, got {header.base_offset}")
    if header.records_count <= 0 or header.last_offset_delta + 1 != header.records_count:
        raise InvalidBatch(
            INVALID_RECORD,
            f"lastOffsetDelta {header.last_offset_delta} does not match "
            f"{header.records_count} records",
        )
    attributes = header.attributes
    if attributes & CONTROL_BIT:
        raise InvalidBatch(INVALID_RECORD, "clients may not produce control batches")
    if attributes & COMPRESSION_MASK > MAX_CODEC:
        raise InvalidBatch(
            CORRUPT_MESSAGE, f"unknown compression codec {attributes & COMPRESSION_MASK}"
        )
    return header


def stamp_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    BASE_OFFSET.pack_into(buf, position, base_offset)


def set_log_append_time(buf: bytearray, timestamp_ms: int, position: int = 0) -> None:
    """Mark a batch as LogAppendTime with the broker's clock; the CRC is recomputed."""
    header = read_header(buf, position)
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", buf, position + 21, attributes)
    struct.pack_into(">q", buf, position + 35, timestamp_ms)
    end = position + header.size
    struct.pack_into(">I", buf, position + 17, crc32c(memoryview(buf)[position + CRC_START : end]))


def check_crc(buf: bytes | bytearray | memoryview, header: BatchHeader, position: int = 0) -> bool:
    end = position + header.size
    return crc32c(memoryview(buf)[position + CRC_START : end]) == header.crc
