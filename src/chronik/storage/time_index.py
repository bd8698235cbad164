# Time index, Kafka's .timeindex format: 12-byte entries
#   timestamp int64, relative offset int32
# An entry is added alongside an offset index entry when the segment's largest
# timestamp has grown, and once more when the segment rolls; it maps the largest
# timestamp seen so far to the last offset of the batch that carried it. Timestamps
# ascend, so the last entry of a closed segment is its largest timestamp.
from __future__ import annotations

import struct

from chronik.storage.sparse_index import SparseIndex


class TimeIndex(SparseIndex):
    ENTRY = struct.Struct(">qi")

    def _decode(self, raw: bytes) -> tuple[int, int]:
        ts, rel = self.ENTRY.unpack(raw)
        return ts, self.base_offset + rel

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key, value - self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        keys = self._keys
        if keys is not None:  # active: the last entry's timestamp is in memory
            if not keys or timestamp > keys[-1]:
                self._append(timestamp, offset)
            return
        last = self.last()
        if last is None or timestamp > last[0]:
            self._append(timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or below ``timestamp``; (-1, base) if none."""
        return self.floor(timestamp) or (-1, self.base_offset)
