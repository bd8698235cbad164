# A segment's aborted-transactions index, Kafka's .txnindex format: for base offset B,
# {B:020d}.txnindex holds one 34-byte entry per transaction aborted by a marker in that
# segment, in the order of the markers, big-endian:
#   version int16 (0), producer_id int64, first_offset int64, last_offset int64,
#   last_stable_offset int64
# first_offset is the transaction's first batch on the partition, last_offset its abort
# marker, last_stable_offset the partition's LSO once the abort completed (a read from
# offset X up to U needs every entry with last_offset >= X and first_offset < U; once an
# entry's last_stable_offset reaches U, no later segment can hold another).
#
# The file is derived data: recovery rebuilds the entries of the batches it replays, and
# a torn last entry, or a tail of zeros (a power loss after the file grew), is dropped
# at load. Entries are kept in memory once read.
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from chronik.storage.diskio import write_all

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            entry = AbortedTxn(*fields)
            # A tail a power loss left zero-filled reads as version 0 too. No real entry
            # is all zeros: an abort whose marker is at offset 0 leaves the last stable
            # offset past it. (A transaction that wrote nothing here before its abort has
            # its first offset at its marker: such entries are real.)
            if version != 0 or not any(fields):
                break
            out.append(entry)
        return out

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            for e in entries:
                if e.producer_id == entry.producer_id and e.last_offset == entry.last_offset:
                    return  # replayed at recovery: already indexed
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_all(fd, _ENTRY.pack(0, *entry))
        finally:
            os.close(fd)
        entries.append(entry)
        self._dirty = True

    def collect(self, start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [start, upper), and whether the search is complete (an
        entry's last stable offset reached ``upper``)."""
        found = []
        for e in self.entries:
            if e.last_offset >= start and e.first_offset < upper:
                found.append(e)
            if e.last_stable_offset >= upper:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._rewrite(keep)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, b"".join(_ENTRY.pack(0, *e) for e in entries))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        self._entries = entries
        self._dirty = False

    def flush(self) -> None:
        if not self._dirty:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._dirty = False
