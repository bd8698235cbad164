# Zig-zag varints, the integer encoding inside record batch v2 records
# (protobuf's sint32/sint64: (n << 1) ^ (n >> 63), 7 bits per byte, low first).
from __future__ import annotations


def write_varint(out: bytearray, value: int) -> None:
    z = (value << 1) ^ (value >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position); raises ValueError past the end or past 10 bytes."""
    shift = 0
    z = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("malformed varint")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (z >> 1) ^ -(z & 1), pos
