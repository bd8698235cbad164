# A log segment, Kafka's layout: in the partition directory, for base offset B,
#   {B:020d}.log        record batches v2 back to back, as stored (baseOffset stamped)
#   {B:020d}.index      offset index (chronik.storage.offset_index)
#   {B:020d}.timeindex  time index (chronik.storage.time_index)
#   {B:020d}.txnindex   aborted transactions, when any (chronik.storage.txn_index)
# A segment's offsets run from B to the next segment's base offset (exclusive).
#
# A write that fails (full disk, I/O error) is undone: the .log and both indexes are cut
# back to their sizes before it and the in-memory state restored, so the next batch lands
# exactly where the last good one ended. If even the cut fails, the segment keeps the
# undo pending and refuses appends until a retry of it succeeds (repair()).
# Descriptors: the three files are chronik.storage.file_cache entries, opened on use and
# closed when cold; the active .log is reopened for append (O_APPEND) after an eviction.
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from chronik.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, check_crc, read_header
from chronik.storage.diskio import write_all
from chronik.storage.file_cache import FILES
from chronik.storage.offset_index import OffsetIndex
from chronik.storage.time_index import TimeIndex
from chronik.storage.txn_index import TransactionIndex

_SCAN_CHUNK = 64 * 1024
_RECOVER_CHUNK = 4 * 1024 * 1024
NO_TIMESTAMP = -1


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class SyncFailed(OSError):
    """An fsync failed: what the file holds on disk is unknown from here on (after a
    failed fsync Linux may drop the dirty pages, and a later fsync then succeeds)."""


def _sync(fsync: Callable[[int], None], fd: int) -> None:
    try:
        fsync(fd)
    except OSError as exc:
        raise SyncFailed(exc.errno, exc.strerror) from exc


# A _Mark's fields in a plain tuple, as the append path makes them.
_MarkFields = tuple[int, int, int, int, int | None, int, int | None]


class _Mark(NamedTuple):
    """A segment's sizes and in-memory state before a write, to return to if it fails."""

    size: int
    index_entries: int
    time_entries: int
    bytes_since_index: int
    max_timestamp: int | None
    offset_of_max_timestamp: int
    first_batch_timestamp: int | None


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, suffix: str = ""
    ) -> None:
        """``suffix`` names a copy being written beside the segment (``.cleaned``)."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / (segment_name(base_offset, ".log") + suffix)
        self.index = OffsetIndex(
            directory / (segment_name(base_offset, ".index") + suffix), base_offset
        )
        self.time_index = TimeIndex(
            directory / (segment_name(base_offset, ".timeindex") + suffix), base_offset
        )
        # Not renamed by compaction: offsets, not positions, are what it records.
        self.txn_index = TransactionIndex(
            directory / (segment_name(base_offset, ".txnindex") + suffix)
        )
        # ``with seg.file as fd:`` pins the .log open for a read, a write or a whole scan.
        self.file = FILES.file(self.log_path, os.O_RDONLY)
        self.size = 0
        self.active = False
        # Kept for the active segment; for a closed one read lazily from the time index.
        self._max_timestamp: int | None = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None  # rolls by segment.ms count from it
        self.created_ms = 0
        self._bytes_since_index = 0
        self._undo: _Mark | None = None  # a failed write whose bytes are not cut off yet

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int
    ) -> LogSegment:
        seg = cls(directory, base_offset, index_interval_bytes)
        try:
            seg.file = FILES.file(
                seg.log_path, os.O_RDWR | os.O_APPEND, create_flags=os.O_CREAT | os.O_TRUNC
            )
            seg.file.open_now()
            seg.index.open_active(reset=True)
            seg.time_index.open_active(reset=True)
        except OSError:
            # No half-made segment: a later roll or restart must not find one.
            seg.delete()
            raise
        seg.active = True
        seg.created_ms = now_ms
        return seg

    @classmethod
    def open_closed(
        cls, directory: Path, base_offset: int, index_interval_bytes: int
    ) -> LogSegment:
        """A rolled segment: its indexes are trusted unless missing or of a torn size."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg.size = seg.log_path.stat().st_size
        seg._max_timestamp = None
        for idx in (seg.index, seg.time_index):
            if not idx.path.exists() or idx.path.stat().st_size % idx.ENTRY.size:
                seg.rebuild_indexes()
                break
        seg.index.open_closed()
        seg.time_index.open_closed()
        return seg

    @classmethod
    def open_active(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        clean: bool,
        now_ms: int,
    ) -> tuple[LogSegment, int, int]:
        """The last segment. After a clean shutdown its indexes are loaded; otherwise every
        batch is checked (header and CRC), the file is cut at the first bad one and the
        indexes are rebuilt. Returns (segment, next offset, bytes truncated)."""
        seg = cls(directory, base_offset, index_interval_bytes)
        seg.file = FILES.file(seg.log_path, os.O_RDWR | os.O_APPEND, create_flags=os.O_CREAT)
        with seg.file as fd:
            stat = os.fstat(fd)
        seg.size = stat.st_size
        seg.active = True
        seg.created_ms = int(stat.st_mtime * 1000) if seg.size else now_ms
        indexes_ok = all(
            idx.path.exists() and idx.path.stat().st_size % idx.ENTRY.size == 0
            for idx in (seg.index, seg.time_index)
        )
        if clean and indexes_ok:
            seg.index.open_active(reset=False)
            seg.time_index.open_active(reset=False)
            next_offset = seg._load_tail()
            if next_offset is not None:
                return seg, next_offset, 0
            # The file changed since the clean close (cut or grown): trust nothing.
            seg.index.close()
            seg.time_index.close()
        seg.index.open_active(reset=True)
        seg.time_index.open_active(reset=True)
        next_offset, truncated = seg._recover()
        return seg, next_offset, truncated

    def _load_tail(self) -> int | None:
        """Next offset and timestamps of a cleanly closed segment: scan from the last index
        entry (at most index.interval.bytes of headers). None if the batches do not end
        exactly at the end of the file."""
        last_ts = self.time_index.last()
        if last_ts is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last_ts
        next_offset = self.base_offset
        last_pos = 0
        tail_end = 0
        first = True
        last_entry = self.index.last()
        for pos, header in self.headers_from(last_entry[1] if last_entry else 0):
            if first and pos == 0:
                self.first_batch_timestamp = header.max_timestamp
            first = False
            next_offset = header.last_offset + 1
            last_pos = pos
            tail_end = pos + header.size
            if header.max_timestamp > self._current_max():
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
        if tail_end != self.size:
            return None
        if self.first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self.first_batch_timestamp = self._first_header().max_timestamp
        self._bytes_since_index = self.size - last_pos if self.size else 0
        return next_offset

    def _first_header(self) -> BatchHeader:
        with self.file as fd:
            return read_header(os.pread(fd, HEADER_SIZE, 0))

    def _recover(self) -> tuple[int, int]:
        """Check every batch of the active segment; truncate at the first torn or corrupt one."""
        with self.file as fd:
            return self._recover_pinned(fd)

    def _recover_pinned(self, fd: int) -> tuple[int, int]:
        valid_end = 0
        next_offset = self.base_offset
        buf = b""
        buf_start = 0
        self._bytes_since_index = 0
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        while True:
            rel = valid_end - buf_start
            if rel + HEADER_SIZE > len(buf):
                chunk = os.pread(fd, _RECOVER_CHUNK, valid_end)
                buf, buf_start, rel = chunk, valid_end, 0
                if len(buf) < HEADER_SIZE:
                    break
            header = read_header(buf, rel)
            if (
                header.magic != 2
                or header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or header.base_offset < next_offset
                or header.last_offset_delta < 0
                or header.records_count < 0
            ):
                break
            if rel + header.size > len(buf):
                need = max(header.size, _RECOVER_CHUNK)
                buf, buf_start, rel = os.pread(fd, need, valid_end), valid_end, 0
                if len(buf) < header.size:
                    break
            if not check_crc(buf, header, rel):
                break
            self._index_batch(valid_end, header)
            valid_end += header.size
            next_offset = header.last_offset + 1
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(fd, valid_end)
            os.fsync(fd)
        self.size = valid_end
        if valid_end >= HEADER_SIZE:
            self.first_batch_timestamp = self._first_header().max_timestamp
        return next_offset, truncated

    def rebuild_indexes(self) -> None:
        """Rewrite both index files of a closed segment from its batch headers."""
        self.index.close()
        self.time_index.close()
        self.index.open_active(reset=True)
        self.time_index.open_active(reset=True)
        self._bytes_since_index = 0
        self._max_timestamp = NO_TIMESTAMP
        for pos, header in self.headers_from(0):
            self._index_batch(pos, header)
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
        self.index.seal()
        self.time_index.seal()
        self.index.open_closed()
        self.time_index.open_closed()
        self._max_timestamp = None

    # -- writing ------------------------------------------------------------------------
    def _current_max(self) -> int:
        return NO_TIMESTAMP if self._max_timestamp is None else self._max_timestamp

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        # On every append: the header's derived properties are spelled out here.
        last_offset = header.base_offset + header.last_offset_delta
        current = self._max_timestamp
        if header.max_timestamp > (NO_TIMESTAMP if current is None else current):
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.batch_length + LOG_OVERHEAD

    def append(self, batch: bytes | bytearray, header: BatchHeader) -> int:
        """Write one batch (baseOffset already stamped) with one write; returns its position.
        On OSError nothing of it remains, in the files or in memory (see repair())."""
        if self._undo is not None:
            self.repair()
        position = self.size
        mark = self._mark()
        try:
            self.file.write(batch)
            self.size = position + len(batch)
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = header.max_timestamp
            self._index_batch(position, header)
        except OSError:
            self._rollback(mark)
            raise
        return position

    def append_batches(
        self, data: bytes | bytearray | memoryview, headers: list[tuple[int, BatchHeader]]
    ) -> int:
        """Write whole batches already stamped (a follower's copy of its leader's bytes)
        with one write and index each; ``headers`` are (position in ``data``, header).
        Returns the position of ``data`` in the file; on OSError nothing of it remains."""
        self.repair()
        mark = self._mark()
        position = self.size
        try:
            with self.file as fd:
                write_all(fd, data)
            self.size += len(data)
            if self.first_batch_timestamp is None and headers:
                self.first_batch_timestamp = headers[0][1].max_timestamp
            index, times = self.index, self.time_index
            index.hold()
            times.hold()
            try:
                for rel, header in headers:
                    self._index_batch(position + rel, header)
            finally:
                try:
                    index.release()
                finally:
                    times.release()
        except OSError:
            self._rollback(mark)
            raise
        return position

    def truncate_to(self, position: int) -> int:
        """Cut the segment at ``position`` (a batch boundary; 0 empties it), indexes
        included, fsync both, and make it the active segment again if it was closed.
        The indexes and in-memory state end up as if nothing after ``position`` had ever
        been appended: index entries of cut batches go, the state is recomputed from the
        last kept index entry (at most index.interval.bytes of headers), as _load_tail
        does at a clean open. Returns the bytes removed."""
        self.repair()
        if not self.active:
            old = self.file
            self.file = FILES.file(self.log_path, os.O_RDWR | os.O_APPEND)
            old.retire()
            self.index.open_active(reset=False)
            self.time_index.open_active(reset=False)
            self.active = True
            with self.file as fd:
                self.created_ms = int(os.fstat(fd).st_mtime * 1000)
        removed = max(0, self.size - position)
        with self.file as fd:
            os.ftruncate(fd, position)
            _sync(os.fsync, fd)
        self.size = position
        # An offset index entry names the batch starting at its position; a time index
        # entry made with it names an offset of that batch or before, and every later
        # time entry (a later index point, or the one added when the segment rolled) an
        # offset after it.
        self.index.truncate_by_value(position)
        last = self.index.last()
        if last is None:
            self.time_index.truncate(0)
            mark_pos = 0
        else:
            self.time_index.truncate_by_value(last[0] + 1)
            mark_pos = last[1]
        self.flush_indexes()
        last_ts = self.time_index.last()
        self._max_timestamp, self._offset_of_max_timestamp = last_ts if last_ts else (-1, -1)
        for _, header in self.headers_from(mark_pos):
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
        self._bytes_since_index = position - mark_pos
        self.first_batch_timestamp = None
        if position >= HEADER_SIZE:
            self.first_batch_timestamp = self._first_header().max_timestamp
        return removed

    def _mark(self) -> _MarkFields:
        """The undo mark, a _Mark's fields as a plain tuple: made on every append, used on
        none but a failed one (which makes it a _Mark)."""
        return (
            self.size,
            self.index.entries,
            self.time_index.entries,
            self._bytes_since_index,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self.first_batch_timestamp,
        )

    def _rollback(self, fields: _MarkFields) -> None:
        mark = _Mark(*fields)
        self.size = mark.size
        self._bytes_since_index = mark.bytes_since_index
        self._max_timestamp = mark.max_timestamp
        self._offset_of_max_timestamp = mark.offset_of_max_timestamp
        self.first_batch_timestamp = mark.first_batch_timestamp
        self._undo = mark
        self.repair()

    @property
    def undo_pending(self) -> bool:
        return self._undo is not None

    def repair(self) -> None:
        """Cut the files back to where the last failed write began; raises OSError (and
        stays pending) while that fails. With O_APPEND every write lands at the end of the
        file, so nothing may be appended before this succeeds."""
        mark = self._undo
        if mark is None:
            return
        with self.file as fd:
            os.ftruncate(fd, mark.size)
        self.index.truncate(mark.index_entries)
        self.time_index.truncate(mark.time_entries)
        self._undo = None

    def seal(self) -> None:
        """Rolled: the last time index entry records the largest timestamp, all is fsynced.
        A failed write of that entry is undone (OSError); a failed fsync raises SyncFailed
        and leaves the segment active. Sealing a sealed segment does nothing."""
        if not self.active:
            return
        self.repair()
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            mark = self._mark()
            try:
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            except OSError:
                self._rollback(mark)
                raise
        with self.file as fd:
            _sync(os.fsync, fd)
        self.file.flags = os.O_RDONLY  # what a reopen after eviction asks for from now on
        try:
            self.index.seal()
            self.time_index.seal()
            self.txn_index.flush()
        except OSError as exc:
            raise SyncFailed(exc.errno, exc.strerror) from exc
        self.index.open_closed()
        self.time_index.open_closed()
        self.active = False

    def flush(self) -> None:
        # Any descriptor of the file will do: fsync flushes the file, not the descriptor.
        # The pin keeps it open if the event loop evicts or closes it meanwhile.
        with self.file as fd:
            _sync(os.fdatasync, fd)

    def flush_indexes(self) -> None:
        try:
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as exc:
            raise SyncFailed(exc.errno, exc.strerror) from exc

    def close(self) -> None:
        """Close for good; a reader or an fsync still holding a pin keeps the descriptor
        until it is done."""
        self.file.retire()
        self.index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            path.unlink(missing_ok=True)
        self.txn_index.delete()

    # -- reading ------------------------------------------------------------------------
    @property
    def max_timestamp(self) -> int:
        if self._max_timestamp is None:
            last = self.time_index.last()
            self._max_timestamp, self._offset_of_max_timestamp = last if last else (-1, -1)
        return self._max_timestamp

    def first_timestamp(self) -> int:
        """The first batch's (max) timestamp; -1 for an empty segment."""
        if self.first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self.first_batch_timestamp = self._first_header().max_timestamp
        return NO_TIMESTAMP if self.first_batch_timestamp is None else self.first_batch_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        _ = self.max_timestamp
        return self._offset_of_max_timestamp

    def read(self, position: int, length: int) -> bytes:
        with self.file as fd:
            return os.pread(fd, length, position)

    def headers_from(
        self, position: int, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``position``, reading headers in chunks."""
        end = self.size if end is None else end
        file = self.file
        while position + HEADER_SIZE <= end:
            # Pinned per chunk, not across yields: a scan left unfinished holds nothing.
            with file as fd:
                buf = os.pread(fd, min(_SCAN_CHUNK, end - position), position)
            off = 0
            while off + HEADER_SIZE <= len(buf):
                header = read_header(buf, off)
                if (
                    header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                    or position + off + header.size > end
                ):
                    return
                yield position + off, header
                off += header.size
            if off == 0:
                return
            position += off

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset`` (the one holding it, or the
        next one after a gap), via the offset index then a forward header scan."""
        _, start = self.index.lookup(offset)
        for pos, header in self.headers_from(start):
            if header.last_offset >= offset:
                return pos, header
        return None

    def whole_batches_end(self, start: int, limit: int) -> int:
        """The end of the last whole batch that starts at ``start`` or later and ends at or
        before ``limit`` (``start`` itself if even the first batch does not fit)."""
        if limit >= self.size:
            return self.size
        _, from_pos = self.index.lookup_position(limit)
        boundary = max(from_pos, start)
        for pos, header in self.headers_from(boundary):
            if pos + header.size > limit:
                break
            boundary = pos + header.size
        return boundary
