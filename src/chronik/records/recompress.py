"""Rewriting a batch in the codec its topic asks for (topic config compression.type).

In a v2 batch the codec applies to the records section as one unit, so changing
it is one decompress and one compress of that section per batch; no record is
decoded. The header keeps every field but the codec bits, the batch length and
the CRC.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from chronik.records import compression
from chronik.records.batch import (
    COMPRESSION_MASK,
    CORRUPT_MESSAGE,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    read_header,
)

# compression.type values and the codec each asks for; "producer" keeps the batch as sent.
TOPIC_CODECS = {
    "uncompressed": compression.NONE,
    "gzip": compression.GZIP,
    "snappy": compression.SNAPPY,
    "lz4": compression.LZ4,
    "zstd": compression.ZSTD,
}


def target_codec(compression_type: str) -> int | None:
    """The codec a topic stores batches in, or None to keep the producer's."""
    return TOPIC_CODECS.get(compression_type)


def recompress(batch: bytearray, header: BatchHeader, codec: int) -> tuple[bytearray, BatchHeader]:
    """The batch with its records section in `codec` (unchanged if it already is)."""
    if header.compression == codec:
        return batch, header
    try:
        records = compression.decompress(header.compression, memoryview(batch)[HEADER_SIZE:])
    except Exception as exc:  # cramjam's DecompressionError: the client sent junk
        raise InvalidBatch(CORRUPT_MESSAGE, f"cannot decompress the records: {exc}") from exc
    body = compression.compress(codec, records)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = batch[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return out, read_header(out)
