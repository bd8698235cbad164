"""A sparse, append-only index file of fixed-size big-endian entries, ordered by key.

Shared by the offset index and the time index. While its segment is active the entries
are also held in memory (a few per index.interval.bytes of log); once the segment is
closed they are looked up with a binary search of pread calls, so memory does not grow
with the data retained. The file's descriptor is a chronik.storage.file_cache entry: the
active index appends through it, a closed one is read through it, and either may be
closed when cold (an active index only writes, so it never needs to stay open).
"""
from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from pathlib import Path

from chronik.storage.file_cache import FILES, CachedFile


class SparseIndex:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._file: CachedFile = FILES.file(path, os.O_RDONLY)
        self._keys: list[int] | None = None
        self._values: list[int] | None = None
        self.entries = 0
        # Entries encoded while held (a follower's run of batches), written in one go.
        self._pending: list[bytes] | None = None

    # -- on-disk entry <-> (key, value) in absolute terms ---------------------------------
    def _decode(self, raw: bytes) -> tuple[int, int]:
        raise NotImplementedError

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    # -- lifecycle -----------------------------------------------------------------------
    def open_active(self, *, reset: bool) -> None:
        """Hold the entries in memory and append to the file. ``reset`` empties it first;
        otherwise the file is trusted and loaded (a whole number of entries)."""
        self._file.retire()
        create = os.O_CREAT | (os.O_TRUNC if reset else 0)
        self._file = FILES.file(self.path, os.O_RDWR | os.O_APPEND, create_flags=create)
        self._keys, self._values = [], []
        self.entries = 0
        if reset:
            # Created (or emptied) at its first write or flush: a new partition costs one
            # file creation, not three.
            return
        with self._file as fd:
            size = os.fstat(fd).st_size
            esz = self.ENTRY.size
            if size % esz:
                os.ftruncate(fd, size - size % esz)
                size -= size % esz
            data = os.pread(fd, size, 0) if size else b""
        if size:
            for i in range(0, size, esz):
                k, v = self._decode(data[i : i + esz])
                self._keys.append(k)
                self._values.append(v)
        self.entries = len(self._keys)

    def open_closed(self) -> None:
        size = self.path.stat().st_size if self.path.exists() else 0
        self.entries = size // self.ENTRY.size
        if self._file.retired:
            self._file = FILES.file(self.path, os.O_RDONLY)

    def seal(self) -> None:
        """The segment rolled: make the file durable and drop the in-memory entries."""
        if self._keys is not None:
            with self._file as fd:
                os.fsync(fd)
            self._file.flags = os.O_RDONLY
            self._file.close()
        self._keys = self._values = None

    def close(self) -> None:
        self._file.retire()
        self._keys = self._values = None

    def flush(self) -> None:
        if self._keys is not None:  # a closed index was made durable when it was sealed
            with self._file as fd:
                os.fsync(fd)

    @property
    def size_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    # -- writing (active only) -----------------------------------------------------------
    def _append(self, key: int, value: int) -> None:
        assert self._keys is not None and self._values is not None
        if self._pending is not None:
            self._pending.append(self._encode(key, value))
        else:
            self._file.write(self._encode(key, value))
        self._keys.append(key)
        self._values.append(value)
        self.entries += 1

    def hold(self) -> None:
        """Entries appended from now on are written by ``release``, in one write: a run of
        batches appended at once costs one index write, not one per batch."""
        self._pending = []

    def release(self) -> None:
        """Write the entries held since ``hold`` (raises OSError, some of them perhaps
        written: the caller's undo cuts the file back, as for a failed append)."""
        pending, self._pending = self._pending, None
        if pending:
            self._file.write(b"".join(pending))

    def truncate(self, entries: int) -> None:
        """Cut the active index back to its first ``entries`` entries, file and memory
        (the undo of a failed write: a torn entry goes with it)."""
        self._pending = None
        if self._keys is None or self._values is None:
            return
        with self._file as fd:
            os.ftruncate(fd, entries * self.ENTRY.size)
        del self._keys[entries:]
        del self._values[entries:]
        self.entries = min(self.entries, entries)

    def truncate_by_value(self, bound: int) -> None:
        """Keep only the entries whose value is below ``bound`` (active only; values
        ascend): what indexed the part of a segment that was cut off goes."""
        if self._values is not None:
            self.truncate(bisect_left(self._values, bound))

    def last(self) -> tuple[int, int] | None:
        if self.entries == 0:
            return None
        if self._keys is not None and self._values is not None:
            return self._keys[-1], self._values[-1]
        return self._entry_on_disk(self.entries - 1)

    # -- lookup --------------------------------------------------------------------------
    def floor(self, key: int) -> tuple[int, int] | None:
        """The entry with the largest key <= ``key``, or None."""
        return self._floor(0, key)

    def floor_by_value(self, value: int) -> tuple[int, int] | None:
        """The entry with the largest value <= ``value`` (values ascend too, e.g. positions)."""
        return self._floor(1, value)

    def _floor(self, column: int, bound: int) -> tuple[int, int] | None:
        """Binary search on keys (column 0) or values (column 1), in memory or on disk."""
        if self._keys is not None and self._values is not None:
            i = bisect_right(self._keys if column == 0 else self._values, bound) - 1
            return (self._keys[i], self._values[i]) if i >= 0 else None
        if self.entries == 0:
            return None
        with self._file as fd:
            lo, hi = 0, self.entries - 1
            found = None
            while lo <= hi:
                mid = (lo + hi) // 2
                entry = self._decode(os.pread(fd, self.ENTRY.size, mid * self.ENTRY.size))
                if entry[column] <= bound:
                    found = entry
                    lo = mid + 1
                else:
                    hi = mid - 1
            return found

    def _entry_on_disk(self, i: int) -> tuple[int, int] | None:
        try:
            with self._file as fd:
                raw = os.pread(fd, self.ENTRY.size, i * self.ENTRY.size)
        except FileNotFoundError:
            return None
        return self._decode(raw) if len(raw) == self.ENTRY.size else None
