# Log compaction (cleanup.policy=compact): rewrite closed segments keeping, per key, only
# the record with the highest offset, with offsets preserved.
#
# Files of one segment's swap, for base offset B, in the order they come and go:
#   1. {B:020d}.log.cleaned, .index.cleaned, .timeindex.cleaned    written and fsynced
#   2. renamed to .index.swap, .timeindex.swap, then .log.swap; the directory is fsynced
#      after each .log.swap. That rename is the swap's commit point. Segments commit in
#      ascending base offset order, so a crash leaves a committed prefix of the pass (a
#      dropped tombstone never commits before the older records it covered).
#   3. installed: .index.swap -> .index and .timeindex.swap -> .timeindex, then
#      .log.swap -> .log, the commit point renamed last; then a directory fsync.
# Recovery at open (finish_interrupted_swaps) keeps the same order: a .log.swap finishes
# its swap, index files first, the .log.swap last. .cleaned files are deleted. Index
# .swap files without their .log.swap (a swap not committed, or renames that reached the
# disk out of order) are deleted together with the segment's live index files, which the
# open then rebuilds from the .log, so an index never describes another version of it.
#
# A pass writes only through a descriptor of the partition directory it opened on the
# thread that owns the log (CompactionJob.pin), so its files land in that directory even
# if the topic is deleted meanwhile (the directory is renamed away and removed) and one
# of the same name created: they never mix with the new topic's files. The worker stops,
# between batches, once the log is closed or deleted, once segments leave it
# (DeleteRecords), or when the broker stops; it then removes the files it made, and
# install() leaves the log as it was. So does a failed write (full disk, I/O error),
# logged once per partition until a pass succeeds.
#
# Batches whose records are all kept are copied byte for byte; others are re-encoded
# with the same base offset, offset deltas, codec, timestamps and producer fields.
# The rewrite runs on a worker thread: it pins each segment's .log open while it scans it
# (chronik.storage.file_cache), so retention deleting that segment meanwhile, or the event
# loop evicting its descriptor, cannot close it under the reader.
# Records without a key are kept. Tombstones (null value) are dropped once their batch
# is older than delete.retention.ms. Control batches are copied as they are. Batches of
# aborted transactions (the segments' .txnindex) are dropped and count for no key, and
# nothing at or past the first open transaction is cleaned, as Kafka's cleaner does, so
# a committed value is never dropped in favour of one that is later aborted.
# Scheduling follows Kafka's cleaner: min.compaction.lag.ms, min.cleanable.dirty.ratio and
# max.compaction.lag.ms decide which segments and when (CompactionJob.due).
from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chronik.records.batch import TIMESTAMP_TYPE_BIT, BatchHeader
from chronik.records.builder import Record, build_batch
from chronik.records.reader import CorruptRecords, iter_records
from chronik.storage.diskio import fsync_dir, write_all
from chronik.storage.segment import LogSegment, segment_name

if TYPE_CHECKING:
    from chronik.storage.partition_log import PartitionLog

_log = logging.getLogger("chronik.storage")

_INDEX_SUFFIXES = (".index", ".timeindex")
_SUFFIXES = (*_INDEX_SUFFIXES, ".log")  # the log last: its .swap is the commit point


def _no_crash(src: Path, dst: Path) -> None:
    return None


# Called before every rename of a swap (at commit, at install and in recovery) with its
# two paths: a test makes it raise to stop a swap between any two renames, as a crash.
before_rename: Callable[[Path, Path], None] = _no_crash


def _rename(src: Path, dst: Path) -> None:
    before_rename(src, dst)
    os.replace(src, dst)


def _never_stop() -> None:
    return None


def finish_interrupted_swaps(directory: Path) -> None:
    """Recovery at open: finish committed swaps, drop the rest (the order is above)."""
    for leftover in directory.glob("*.cleaned"):
        leftover.unlink()
    swaps: dict[str, set[str]] = {}
    for swap in directory.glob("*.swap"):
        stem, _, suffix = swap.name[: -len(".swap")].partition(".")
        swaps.setdefault(stem, set()).add("." + suffix)
    if not swaps:
        return
    doubtful = []
    for stem in sorted(swaps):
        if ".log" not in swaps[stem]:
            doubtful.append(stem)
            continue
        for suffix in _SUFFIXES:
            if suffix in swaps[stem]:
                _rename(directory / f"{stem}{suffix}.swap", directory / f"{stem}{suffix}")
    # The live indexes go before the .swap files that cast doubt on them.
    for stem in doubtful:
        for suffix in _INDEX_SUFFIXES:
            (directory / f"{stem}{suffix}").unlink(missing_ok=True)
    if doubtful:
        fsync_dir(directory)
    for stem in doubtful:
        for suffix in swaps[stem]:
            (directory / f"{stem}{suffix}.swap").unlink(missing_ok=True)
    fsync_dir(directory)


# Per producer id, the (first, last) offsets of its aborted transactions.
Aborted = dict[int, list[tuple[int, int]]]


def aborted_ranges(segments: list[LogSegment]) -> Aborted:
    out: Aborted = {}
    for seg in segments:
        for e in seg.txn_index.entries:
            out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
    return out


def _aborted(header: BatchHeader, aborted: Aborted) -> bool:
    if not header.is_transactional or header.producer_id not in aborted:
        return False
    base = header.base_offset
    return any(first <= base <= last for first, last in aborted[header.producer_id])


def latest_offsets(
    segments: list[LogSegment],
    check: Callable[[], None] = _never_stop,
    aborted: Aborted | None = None,
) -> dict[bytes, int]:
    """The offset of each key's last record. ``check`` is called before each batch; it
    raises to stop the scan."""
    latest: dict[bytes, int] = {}
    aborted = aborted or {}
    for seg in segments:
        with seg.file:
            for pos, header in seg.headers_from(0):
                check()
                if header.is_control or _aborted(header, aborted):
                    continue
                try:
                    for rec in iter_records(seg.read(pos, header.size)):
                        if rec.key is not None:
                            latest[rec.key] = rec.offset
                except CorruptRecords:
                    continue  # kept as it is by _rewrite_batch; its keys are unknowable
    return latest


def _rewrite_batch(
    data: bytes, header: BatchHeader, latest: dict[bytes, int], drop_tombstones: bool
) -> bytes | None:
    try:
        records = list(iter_records(data))
    except CorruptRecords:
        # A client sealed undecodable records with a valid CRC: keep the batch as it is
        # rather than fail every compaction of the partition.
        return data
    kept = [
        r
        for r in records
        if r.key is None
        or (latest.get(r.key) == r.offset and not (r.value is None and drop_tombstones))
    ]
    if len(kept) == len(records):
        return data
    if not kept:
        return None
    append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    return build_batch(
        [Record(r.timestamp, r.key, r.value, r.headers) for r in kept],
        base_offset=header.base_offset,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        log_append_time=append_time,
        partition_leader_epoch=header.partition_leader_epoch,
        offset_deltas=[r.offset - header.base_offset for r in kept],
        transactional=header.is_transactional,
    )


def clean_segment(
    seg: LogSegment,
    latest: dict[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    directory: Path | None = None,
    check: Callable[[], None] = _never_stop,
    aborted: Aborted | None = None,
) -> int:
    """Write the compacted copy of ``seg`` as .cleaned files in ``directory`` (the
    segment's own by default), the log and both indexes fsynced. Returns how many bytes
    it saves (0: nothing to do, no file left behind). ``check`` is called before each
    batch; it raises to stop the rewrite, which then leaves its .cleaned files."""
    directory = seg.directory if directory is None else directory
    aborted = aborted or {}
    drop_tombstones = now_ms - seg.max_timestamp > delete_retention_ms
    out_path = directory / (segment_name(seg.base_offset, ".log") + ".cleaned")
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    try:
        with seg.file:
            for pos, header in seg.headers_from(0):
                check()
                if _aborted(header, aborted):
                    continue
                data = seg.read(pos, header.size)
                if not header.is_control:
                    data = _rewrite_batch(data, header, latest, drop_tombstones)
                if data:
                    write_all(fd, data)
                    written += len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if written == seg.size:
        out_path.unlink()
        return 0
    # Index the new file with a throwaway segment object named after the .cleaned file.
    cleaned = LogSegment(directory, seg.base_offset, seg.index_interval_bytes, ".cleaned")
    cleaned.size = written
    try:
        cleaned.rebuild_indexes()
    finally:
        cleaned.close()
    return seg.size - written


def commit_swap(directory: Path, base_offset: int) -> None:
    """Step 2 of a segment's swap: its .cleaned files become .swap files, the log's last
    (the commit point), made durable by a directory fsync."""
    for suffix in _SUFFIXES:
        name = segment_name(base_offset, suffix)
        _rename(directory / (name + ".cleaned"), directory / (name + ".swap"))
    fsync_dir(directory)


class _Abandon(Exception):
    """The pass's input went away, or the broker is stopping."""


class CompactionJob:
    """One compaction of a log, in two steps: ``run`` writes the compacted copies of the
    closed segments (file I/O only, safe on a worker thread while the log keeps serving),
    then ``install`` swaps them in, or cleans up after a pass that could not finish, on
    the thread that owns the log. Every job that was pinned must reach ``install``."""

    def __init__(self, log: PartitionLog, now_ms: int) -> None:
        self.log = log
        closed = list(log.segments[:-1])
        # min.compaction.lag.ms: as Kafka, a segment holding a record younger than the lag,
        # and every segment after it, stays as written (and adds nothing to the key map).
        lag = log.config.min_compaction_lag_ms
        # Nothing at or past the last stable offset is cleaned: not an open transaction,
        # nor what the ISR does not hold yet (the LSO is at most the high watermark), as
        # a new leader may not have those records and this replica may be truncated.
        stable = log.last_stable_offset
        bases = [*log._bases[1:]]
        cut = next(
            (
                i
                for i, seg in enumerate(closed)
                if lag and seg.max_timestamp > now_ms - lag or bases[i] > stable
            ),
            len(closed),
        )
        self.segments = closed[:cut]
        self.through = closed[cut].base_offset if cut < len(closed) else log.active.base_offset
        self.now_ms = now_ms
        self.delete_retention_ms = log.config.delete_retention_ms
        self.aborted = aborted_ranges(log.segments)
        self.swapped: list[LogSegment] = []
        self.saved = 0
        self.abandoned: str | None = None  # why the pass stopped before its end
        self.failure: OSError | None = None  # a write that failed (full disk, I/O error)
        self.error: Exception | None = None  # anything else: a bug
        self._drops = log.segment_drops
        self._stop = threading.Event()
        self._dir_fd: int | None = None
        self.workdir = log.directory
        self._cleaned_up = False

    def due(self, first_dirty: int) -> bool:
        """Kafka's cleaner rule: the dirty part (segments from ``first_dirty``, not compacted
        yet) is at least min.cleanable.dirty.ratio of the cleanable bytes, or has waited
        longer than max.compaction.lag.ms."""
        dirty = [seg for seg in self.segments if seg.base_offset >= first_dirty]
        if not dirty:
            return False
        config = self.log.config
        total = sum(seg.size for seg in self.segments)
        if total and sum(seg.size for seg in dirty) / total >= config.min_cleanable_dirty_ratio:
            return True
        oldest = dirty[0].first_timestamp()
        return oldest >= 0 and self.now_ms - oldest > config.max_compaction_lag_ms

    # -- lifecycle ------------------------------------------------------------------------
    def pin(self) -> CompactionJob:
        """Hold the log's directory for this pass: a descriptor to write through (see the
        format comment), and the log defers removing it if it is deleted meanwhile. On
        the thread that owns the log, while it is open."""
        if self._dir_fd is None:
            self._dir_fd = os.open(self.log.directory, os.O_RDONLY | os.O_DIRECTORY)
            self.workdir = _through_descriptor(self._dir_fd, self.log.directory)
            self.log.hold()
        return self

    def stop(self) -> None:
        """Ask a running pass to stop before its next batch (from any thread); one already
        committing its swaps finishes."""
        self._stop.set()

    def _gone(self, *, stopping: bool = True) -> str | None:
        log = self.log
        if log.closed:
            return "the partition was deleted" if log.deleted else "the partition was closed"
        if log.segment_drops != self._drops:
            return "segments it was reading were deleted (DeleteRecords)"
        if stopping and self._stop.is_set():
            return "the broker is stopping"
        return None

    def _check(self) -> None:
        reason = self._gone()
        if reason is not None:
            raise _Abandon(reason)

    # -- step 1, on a worker thread ---------------------------------------------------------
    def run(self) -> CompactionJob:
        """Write and commit the compacted segments. Never raises: a pass that cannot
        finish removes what it made and says why in ``abandoned``, ``failure`` or
        ``error``, for ``install`` to report."""
        if not self.segments:
            return self
        self.pin()
        try:
            latest = latest_offsets(self.segments, self._check, self.aborted)
            for seg in self.segments:
                self._check()
                gain = clean_segment(
                    seg,
                    latest,
                    self.now_ms,
                    self.delete_retention_ms,
                    directory=self.workdir,
                    check=self._check,
                    aborted=self.aborted,
                )
                if gain:
                    self.saved += gain
                    self.swapped.append(seg)
            self._check()
            # From here on the pass finishes even if asked to stop: a few renames.
            for seg in self.swapped:
                commit_swap(self.workdir, seg.base_offset)
        except _Abandon as exc:
            self.abandoned = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported by install() on the log's thread
            # A segment deleted under the reader fails in many ways (ENOENT, EBADF, a
            # reused descriptor's bytes): when the input is gone, that is the reason.
            self.abandoned = self._gone()
            if self.abandoned is None:
                if isinstance(exc, OSError):
                    self.failure = exc
                else:
                    self.error = exc
        if not self.finished:
            self._remove_files()
        return self

    @property
    def finished(self) -> bool:
        return self.abandoned is None and self.failure is None and self.error is None

    def _remove_files(self) -> None:
        """Remove every .cleaned and .swap file of this pass, newest segment first and
        each log's .swap before its indexes', so what a crash leaves is still a
        committed prefix."""
        if self._cleaned_up or self._dir_fd is None:
            return
        self._cleaned_up = True
        removed = False
        for seg in reversed(self.segments):
            for suffix in (".log", ".index", ".timeindex"):
                name = segment_name(seg.base_offset, suffix)
                for temp in (".swap", ".cleaned"):
                    # What cannot be removed now, recovery at the next open removes.
                    with contextlib.suppress(OSError):
                        (self.workdir / (name + temp)).unlink()
                        removed = True
        if removed:
            with contextlib.suppress(OSError):
                fsync_dir(self.workdir)

    # -- step 2, on the thread that owns the log -------------------------------------------
    def install(self) -> int:
        """Swap the compacted segments in and return the bytes saved; or, after a pass
        that could not finish or whose input changed meanwhile (the log deleted or
        closed, segments dropped by DeleteRecords), leave the log as it was, remove the
        pass's files, and log why once. Ends the job in every case. Raises only what was
        a bug in ``run``."""
        log = self.log
        try:
            if self.finished:
                self.abandoned = self._gone(stopping=False)
            if not self.finished:
                self._remove_files()
                self._report()
                return 0
            if self.swapped:
                self._swap_in()
            if log.compaction_failure is not None:
                log.compaction_failure = None
                _log.info("partition %s: compaction resumed", log.name)
            log.compacted_through(self.through)
            return self.saved
        finally:
            self._release()

    def _report(self) -> None:
        log = self.log
        if self.abandoned is not None:
            _log.info(
                "partition %s: compaction pass abandoned, its files removed: %s",
                log.name,
                self.abandoned,
            )
        elif self.failure is not None:
            reason = self.failure.strerror or str(self.failure)
            if reason != log.compaction_failure:
                log.compaction_failure = reason
                _log.warning(
                    "partition %s: compaction failed: %s; the log is left as it was and "
                    "compaction is tried again at later checks",
                    log.name,
                    reason,
                )
        elif self.error is not None:
            raise self.error

    def _swap_in(self) -> None:
        log = self.log
        directory = self.workdir
        for seg in self.swapped:
            for suffix in _INDEX_SUFFIXES:
                name = segment_name(seg.base_offset, suffix)
                _rename(directory / (name + ".swap"), directory / name)
        for seg in self.swapped:
            name = segment_name(seg.base_offset, ".log")
            _rename(directory / (name + ".swap"), directory / name)
        fsync_dir(directory)
        for old in self.swapped:
            new = LogSegment.open_closed(log.directory, old.base_offset, old.index_interval_bytes)
            log.replace_segments([old], [new])
            old.close()

    def _release(self) -> None:
        if self._dir_fd is None:
            return
        os.close(self._dir_fd)
        self._dir_fd = None
        self.log.release()


def _through_descriptor(dir_fd: int, directory: Path) -> Path:
    """A path that reaches the directory ``dir_fd`` was opened on wherever it is now
    (renamed, or unlinked: then nothing can be created in it), on Linux."""
    proc = Path(f"/proc/self/fd/{dir_fd}")
    return proc if proc.is_dir() else directory


def compact(log: PartitionLog, now_ms: int) -> int:
    """Compact every closed segment of ``log`` now; returns the bytes saved."""
    return CompactionJob(log, now_ms).pin().run().install()
