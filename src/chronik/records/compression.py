# Record batch compression codecs (the attributes' low 3 bits): 0 none, 1 gzip,
# 2 snappy, 3 lz4, 4 zstd. The compressed unit is the records section (after the
# 61-byte header).
#
# snappy: Java's producer writes xerial snappy-java framing:
#   magic "\x82SNAPPY\x00", int32 version, int32 min compatible version,
#   then blocks of [int32 compressed length][raw snappy block];
# librdkafka writes one raw snappy block. Both are read; xerial framing is written.
# lz4: the LZ4 frame format with independent blocks and no content checksum
# (what Kafka's KafkaLZ4BlockOutputStream writes and its reader accepts).
from __future__ import annotations

import struct

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BY_NAME = {name: codec for codec, name in NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")


class UnsupportedCodec(ValueError):
    pass


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        comp = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        comp.compress(bytes(data))
        return bytes(comp.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCodec(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        view = memoryview(data)
        if bytes(view[:8]) == XERIAL_MAGIC:
            return _xerial_decompress(view)
        return bytes(cramjam.snappy.decompress_raw(view))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise UnsupportedCodec(f"unknown compression codec {codec}")


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _xerial_decompress(view: memoryview) -> bytes:
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos + 4 <= len(view):
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise ValueError("truncated xerial snappy block")
        out += bytes(cramjam.snappy.decompress_raw(view[pos : pos + length]))
        pos += length
    return bytes(out)
