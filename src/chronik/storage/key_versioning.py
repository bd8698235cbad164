"""Per-key versions of one partition's log, for a topic with key.versioning.enable: the
log holds a KeyVersioning only while the topic opts in (None otherwise).

It owns no format of its own: the versions live in the records, as chronik-version
headers (chronik.records.versions, stamped here on each appended client batch), and in
key-versions.db (chronik.storage.key_index), an index that can always be rebuilt from
those headers. The log is the truth, so every change of the log is passed on here
(appends, replicated batches, truncation, a moved log start, compaction) and a failed
index write is logged, not raised: the index is then brought up to the log before the
next append is stamped, and until that works appends are refused (KafkaStorageError).
"""
from __future__ import annotations

import logging
import sqlite3
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from chronik.records.batch import BatchHeader, read_header
from chronik.records.reader import CorruptRecords, iter_records
from chronik.records.versions import Stamped, header_version, stamp_versions
from chronik.storage.errors import KafkaStorageError
from chronik.storage.key_index import FILE_NAME as KEY_INDEX_FILE
from chronik.storage.key_index import FORMAT as KEY_INDEX_FORMAT
from chronik.storage.key_index import KeyIndex

if TYPE_CHECKING:
    from chronik.storage.partition_log import PartitionLog

log = logging.getLogger("chronik.storage")

_INDEX_CHUNK = 10_000  # rows per index transaction when indexing a log tail


class KeyVersioning:
    def __init__(self, plog: PartitionLog) -> None:
        # Weak: the log owns this object, and a log dropped unclosed must still be freed
        # (its index connection closed) as soon as the last reference goes, not at the
        # next cyclic garbage collection.
        self._log_ref = weakref.ref(plog)
        # None until it could be opened, and after close.
        self.index: KeyIndex | None = None

    @property
    def _log(self) -> PartitionLog:
        plog = self._log_ref()
        assert plog is not None  # only the log calls in
        return plog

    # -- open / close ---------------------------------------------------------------------
    def open(self) -> None:
        """At the log's open; a failure is logged, and appends retry the open."""
        try:
            self._open()
        except (sqlite3.Error, OSError) as exc:
            self._error("not opened", exc)

    def enable(self) -> None:
        """The topic opted in just now: build the index from the whole log."""
        try:
            self._open(rebuild=True)
        except (sqlite3.Error, OSError) as exc:
            self._error("not built", exc)

    def disable(self) -> None:
        """The topic opted out: the file stays, marked as no longer following the log."""
        index, self.index = self.index, None
        if index is not None:
            try:
                index.set_maintained(False)
            except sqlite3.Error as exc:
                self._error("not marked unmaintained", exc)
            index.close()

    def close(self, save: bool) -> None:
        """``save``: the log closed cleanly, so the index end is recorded as the log's."""
        index, self.index = self.index, None
        if index is None:
            return
        end = self._log.end_offset
        if save and not index.stale and index.end <= end:
            try:
                index.record_batch([], 0, end, {})
            except sqlite3.Error as exc:
                self._error("end not saved", exc)
        index.close()

    def _open(self, rebuild: bool = False) -> None:
        """Open the index and make it agree with the log; ``rebuild`` (the topic opted in
        just now, or the index is known to be wrong) builds it from the whole log."""
        if self.index is not None:
            self.index.close()
            self.index = None
        plog = self._log
        path = plog.directory / KEY_INDEX_FILE
        index = None
        why = None
        if not rebuild and path.exists():
            try:
                index = KeyIndex(path)
            except sqlite3.Error as exc:
                why = f"unreadable ({exc})"
            else:
                if not index.maintained:
                    index.close()
                    index = None
                    why = "not maintained while key.versioning.enable was off"
                elif index.format != KEY_INDEX_FORMAT:
                    index_format = index.format
                    index.close()
                    index = None
                    why = f"in format {index_format}, not {KEY_INDEX_FORMAT}"
        elif not rebuild and plog.end_offset > plog.start_offset:
            why = "missing"
        if index is None:
            if why is not None:
                log.warning(
                    "partition %s: key version index %s; rebuilding it from the log",
                    plog.name,
                    why,
                )
            index = KeyIndex.create(plog.directory)
        self.index = index
        self._sync(index)

    # -- appends ----------------------------------------------------------------------------
    def stamp(self, batch: bytearray, header: BatchHeader) -> Stamped:
        """The default prepare of an opted-in log: check expected versions and stamp each
        keyed record's version (chronik.records.versions), from an index that agrees with
        the log. Nothing awaits between this and the append: the check is atomic."""
        index = self.ready()
        try:
            index.begin()
            return stamp_versions(batch, header, index.version_count)
        except BaseException:
            index.release()
            raise

    def ready(self) -> KeyIndex:
        """The index, brought up to the log end first if a write of it failed; raises
        KafkaStorageError if that cannot be done (the append is refused)."""
        index = self.index
        if index is not None and not index.stale and index.end == self._log.end_offset:
            return index
        try:
            if index is None:
                self._open()
            elif index.stale:
                self._open(rebuild=True)
            else:
                self._sync(index)
        except (sqlite3.Error, OSError) as exc:
            self._error("not brought up to the log end", exc)
            raise KafkaStorageError(
                f"partition {self._log.name}: key version index unavailable: {exc}"
            ) from None
        assert self.index is not None
        return self.index

    def appended(self, stamped: Stamped, base: int) -> None:
        """Index a stamped batch appended at ``base``. A failure is logged: the index stays
        behind the log, and the next append brings it up from the log first."""
        index = self.index
        if index is None:
            return
        end = self._log.end_offset
        if not stamped.versions:
            index.advance(end)
            return
        try:
            index.record_batch(stamped.versions, base, end, stamped.counts)
        except sqlite3.Error as exc:
            self._error("write failed", exc)

    def replicated(self, batches: Iterable[bytes | memoryview], offset: int) -> None:
        """Index a leader's batches as a follower appended them (from ``offset``). A
        follower never numbers records itself: the leader's headers say."""
        index = self.index
        if index is None or index.stale:
            return
        try:
            self._index_batches(index, batches, offset)
        except sqlite3.Error as exc:
            self._error("write failed", exc)

    # -- the log changed --------------------------------------------------------------------
    def cut(self, end: int, start: int | None = None) -> None:
        """The log was cut back to ``end`` (and, emptied, starts at ``start``)."""
        index = self.index
        if index is None:
            return
        try:
            if index.end > end:
                index.truncate(end)
            if start is not None:
                index.start = start
                index.drop_below(start)
        except sqlite3.Error as exc:
            index.stale = True  # rebuilt from the log before the next append
            self._error("not truncated", exc)

    def start_moved(self, start: int) -> None:
        index = self.index
        if index is None:
            return
        index.start = start  # reads skip the rows below at once
        try:
            index.drop_below(start)
        except sqlite3.Error as exc:
            self._error("rows below the log start not removed", exc)

    def compacted(self, through: int) -> None:
        index = self.index
        if index is not None:
            try:
                index.prune_compacted(through)
            except sqlite3.Error as exc:
                # Reads skip offsets that no longer hold their record all the same.
                self._error("compacted rows not removed", exc)

    # -- a follower that started over at its leader's log start -----------------------------
    @property
    def floor(self) -> int:
        index = self.index
        return index.floor if index is not None else 0

    def set_floor(self, offset: int) -> None:
        index = self.index
        if index is not None:
            try:
                index.set_floor(offset)
            except sqlite3.Error as exc:
                self._error("floor not saved", exc)

    def counts_below(
        self, below: int, after: bytes | None, limit: int
    ) -> list[tuple[bytes, int]]:
        return self.ready().counts_below(below, after, limit)

    def raise_counts(self, counts: list[tuple[bytes, int]], done: bool) -> None:
        index = self.index
        if index is not None:
            index.raise_counts(counts, done)

    # -- from the log -----------------------------------------------------------------------
    def _sync(self, index: KeyIndex) -> None:
        """Make the index agree with the log: never beyond its end, nothing below its
        start, and the tail it lacks indexed from the records' chronik-version headers."""
        start, end = self._log.start_offset, self._log.end_offset
        index.start = start
        if index.end > end:
            index.truncate(end)
        index.drop_below(start)
        if index.end < end:
            self._index_batches(index, self._stored_batches(index.end), index.end)
        index.stale = False

    def _stored_batches(self, offset: int) -> Iterator[bytes]:
        """The batches of the log from the one holding ``offset`` to its end."""
        if offset >= self._log.end_offset:
            return
        for seg, pos, header in self._log.batches_from(offset):
            if header.last_offset < offset:
                continue
            yield seg.read(pos, header.size)

    def _index_batches(
        self, index: KeyIndex, batches: Iterable[bytes | memoryview], offset: int
    ) -> None:
        """Index the keyed records at or past ``offset`` of stored batches: versions from
        their chronik-version headers; a record without one (written before the topic
        opted in) takes the key's next number. Commits every _INDEX_CHUNK rows; the index
        ends at the log end after the last."""
        rows: list[bytes | int] = []  # key, version, offset of each: KeyIndex.record_batch
        pending: dict[bytes, int] = {}  # each key's count after the rows
        index.begin()
        for batch in batches:
            header = read_header(batch)
            if header.is_control:
                continue
            try:
                records = list(iter_records(batch))
            except CorruptRecords:
                continue  # sealed undecodable by a client: its keys are unknowable
            for rec in records:
                if rec.key is None or rec.offset < offset:
                    continue
                version = header_version(rec)
                known = pending.get(rec.key)
                if known is None:
                    known = index.version_count(rec.key)
                if version is None:
                    version = known
                pending[rec.key] = max(known, version + 1)
                rows += (rec.key, version, rec.offset)
            if len(rows) >= 3 * _INDEX_CHUNK:
                index.record_batch(rows, 0, header.last_offset + 1, pending)
                rows = []
                pending = {}
                index.begin()
        index.record_batch(rows, 0, self._log.end_offset, pending)

    def _error(self, what: str, exc: BaseException) -> None:
        log.error("partition %s: key version index %s: %s", self._log.name, what, exc)
