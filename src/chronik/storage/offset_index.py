# Offset index, Kafka's .index format: 8-byte entries
#   relative offset int32 (offset - segment base offset), position int32 (byte in .log)
# Sparse: one entry after every index.interval.bytes of log, naming the last offset of
# the batch that starts at that position. Both columns ascend.
from __future__ import annotations

import struct

from chronik.storage.sparse_index import SparseIndex


class OffsetIndex(SparseIndex):
    ENTRY = struct.Struct(">ii")

    def _decode(self, raw: bytes) -> tuple[int, int]:
        rel, pos = self.ENTRY.unpack(raw)
        return self.base_offset + rel, pos

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key - self.base_offset, value)

    def append(self, offset: int, position: int) -> None:
        self._append(offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none."""
        return self.floor(offset) or (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose batch starts at or before ``position``."""
        return self.floor_by_value(position) or (self.base_offset, 0)
