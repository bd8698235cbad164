# One partition's log: a directory of segments (chronik.storage.segment), Kafka's layout:
#   {topic}-{partition}/
#     {base:020d}.log / .index / .timeindex   segments, ascending base offsets
#     {base:020d}.txnindex                    aborted transactions whose abort marker is
#                                             in that segment (chronik.storage.txn_index)
#     {offset:020d}.snapshot                  producer state (chronik.storage.producer_state)
#     leader-epoch-checkpoint                 leader epochs (chronik.storage.leader_epoch),
#                                             only once a replicated leader or follower
#                                             has appended
#     log-start-offset                        decimal log start offset, when DeleteRecords
#                                             moved it inside the first segment
#                                             (chronik.storage.log_start)
#     .clean-shutdown                         present only between close() and open()
#                                             (chronik.storage.log_loader)
#     key-versions.db (-wal, -shm)            per-key version index, only for topics with
#                                             key.versioning.enable (chronik.storage.key_index,
#                                             kept by chronik.storage.key_versioning)
#     *.cleaned, *.swap                       a compaction pass (chronik.storage.compaction)
#
# A new partition directory, its first segment included, is fsynced into its parent
# before anything is appended. Deleting a partition renames its directory to
# {topic}-{partition}.{32 hex digits}-delete (as Kafka does), fsyncs the parent, then
# removes it; a compaction pass still writing into it defers the removal to its end.
# Load removes any such directory a crash left.
#
# Recovery at open (segments checked, the last one cut at its first torn or corrupt
# batch, producer state, leader epochs and the saved log start loaded) is
# chronik.storage.log_loader's; this module keeps the running log.
#
# Key versions (key.versioning.enable): the log holds a KeyVersioning
# (chronik.storage.key_versioning) only while the topic opts in, and passes every change
# of the log on to it.
#
# Transactions: a transactional batch opens its producer's transaction on the partition;
# a marker (append_marker, or a leader's control batch replicated) ends it. The last
# stable offset is the high watermark, or the first offset of the oldest open
# transaction if lower: read_committed consumers read below it.
#
# Replication (Kafka's follower side, KIP-101): a follower appends its leader's batches
# as they are (append_replicated), cuts its log back to where it diverges from the
# leader's (truncate_to; later segments deleted first, newest first, so a crash part way
# leaves a shorter but whole log), or starts over at the leader's log start offset
# (truncate_fully_and_start_at). A replicated log's high watermark is set by the replica
# manager and bounds what consumers read (read(max_offset=)).
#
# Storage errors: a failed write (full disk, I/O error) is cut back by the segment before
# anything else is appended, the request gets KAFKA_STORAGE_ERROR, and every later append
# tries again, so writes resume by themselves once space returns. A failed fsync leaves
# what is on disk unknown: the partition goes offline for writes (reads go on) until a
# restart, whose recovery checks every batch of the last segment, as Kafka takes a log
# directory offline. Each change of state is logged once.
from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import struct
import time
import uuid
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from chronik.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    check_crc,
    read_header,
    set_log_append_time,
    stamp_base_offset,
)
from chronik.records.control import InvalidMarker, build_marker, read_marker
from chronik.records.reader import iter_records
from chronik.records.versions import Stamped
from chronik.storage import log_loader, log_start
from chronik.storage.compaction import CompactionJob, compact
from chronik.storage.config import LogConfig
from chronik.storage.diskio import fsync_dir
from chronik.storage.errors import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaStorageError,
    OffsetOutOfRange,
    ProducerStateError,
)
from chronik.storage.file_region import FileRegion
from chronik.storage.key_index import KeyIndex
from chronik.storage.key_versioning import KeyVersioning
from chronik.storage.leader_epoch import LeaderEpochCache
from chronik.storage.log_loader import CLEAN_SHUTDOWN
from chronik.storage.producer_state import CompletedTxn, ProducerStateManager, snapshot_path
from chronik.storage.segment import LogSegment, SyncFailed

log = logging.getLogger("chronik.storage")

DELETE_SUFFIX = "-delete"
_MAX_NAME = 255
_MAX_RELATIVE_OFFSET = 2**31 - 1
_READ_HINTS = 64
_EPOCH = struct.Struct(">i")
_EPOCH_AT = 12  # partitionLeaderEpoch in the batch header


# Prepares a client batch for the log after the duplicate check: the batch and header to
# write, (key, version, offset delta) of each record to put in the key index and each
# key's version count after it.
Prepare = Callable[[bytearray, BatchHeader], Stamped]


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class PartitionLog:
    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._start_offset = 0
        self._end_offset = 0
        self._closed_size = 0  # bytes in closed segments
        self.producer_state = ProducerStateManager(directory)
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        # Group commit bookkeeping: appends are numbered; durable_seq is the highest one
        # known to be on disk.
        self.append_seq = 0
        self.durable_seq = 0
        self.recovered_bytes_truncated = 0
        self._read_hints: OrderedDict[int, tuple[LogSegment, int]] = OrderedDict()
        self._compacted_through = 0
        self.closed = False
        self._write_failure: str | None = None  # why the last write failed, until one works
        self.offline: str | None = None  # why an fsync failed: no writes until restart
        # Told once when the partition goes offline (the replica manager hands its
        # leadership on).
        self.on_offline: Callable[[PartitionLog], None] | None = None
        self.deleted = False
        # Bumped before segments leave the log (DeleteRecords, retention, close): a
        # compaction pass reading them on a worker thread sees it and stops.
        self.segment_drops = 0
        self.compaction_failure: str | None = None  # logged once, until a pass succeeds
        self._holders = 0  # compaction passes writing into the directory
        self._doomed: Path | None = None  # the renamed directory they keep from removal
        self.epochs = LeaderEpochCache(directory)
        # Set by the replica manager while this broker leads the partition: stamped into
        # each appended batch's partitionLeaderEpoch. -1: a single node, nothing stamped.
        self.leader_epoch = -1
        # In a cluster the high watermark is the replica manager's; otherwise the log end.
        self.replicated = False
        self._high_watermark = 0
        # key.versioning.enable: None when the topic does not opt in.
        self.versioning: KeyVersioning | None = (
            KeyVersioning(self) if config.key_versioning else None
        )

    # -- open / close ---------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int | None = None) -> PartitionLog:
        """Open (or create) the partition in ``directory``, recovered as after a crash
        unless it was closed cleanly (chronik.storage.log_loader)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config)
        loaded = log_loader.load(
            directory, config, log.producer_state, log.epochs, created=created, now_ms=now_ms
        )
        log._set_segments(loaded.segments)
        log._start_offset = loaded.start_offset
        log._end_offset = loaded.end_offset
        log.recovered_bytes_truncated = loaded.recovered_bytes_truncated
        if log.versioning is not None:
            log.versioning.open()
        if loaded.clean:
            log_loader.forget_clean_shutdown(directory)
        return log

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self._closed_size = sum(s.size for s in segments[:-1])
        self._read_hints.clear()

    def _recover_producer_state(self) -> None:
        log_loader.rebuild_producer_state(
            self.producer_state, self.segments, self._bases, self._end_offset
        )

    def _index_aborted(self, done: CompletedTxn, last_stable_offset: int) -> None:
        log_loader.index_aborted(self.segments, self._bases, done, last_stable_offset)

    def close(self) -> str | None:
        """Flush, snapshot producer state and mark the shutdown clean. Never raises: if any
        of it fails (full disk, I/O error) the rest is skipped and the log is left to be
        recovered at the next start as after a crash; returns why (None: clean)."""
        if self.closed:
            return None
        problem = self.offline
        if problem is None:
            try:
                self.active.repair()
                try:
                    self.active.flush()
                except OSError as exc:
                    self.sync_failed(exc)  # nothing still waiting may be acknowledged
                    raise
                self.durable_seq = self.append_seq
                self.active.flush_indexes()
                self.producer_state.take_snapshot(self._end_offset)
                self.producer_state.delete_snapshots_below(self._end_offset)
            except OSError as exc:
                problem = _reason(exc)
        if self.versioning is not None:
            self.versioning.close(save=problem is None)
        self.segment_drops += 1
        for seg in self.segments:
            try:
                seg.close()
            except OSError as exc:
                problem = problem or _reason(exc)
        if problem is None:
            marker = self.directory / CLEAN_SHUTDOWN
            try:
                marker.touch()
                fsync_dir(self.directory)
            except OSError as exc:
                problem = _reason(exc)
                marker.unlink(missing_ok=True)
        if problem is not None:
            log.debug("partition %s: not closed cleanly: %s", self.name, problem)
        self.closed = True
        return problem

    def delete(self) -> None:
        """Close and remove the partition: its directory is first renamed away, so a
        partition of the same name may be created at once, and what is still writing
        into the old one (a compaction pass) cannot touch it."""
        self.segment_drops += 1
        if self.versioning is not None:
            self.versioning.close(save=False)
        if not self.closed:
            for seg in self.segments:
                seg.close()
            self.closed = True
        self.deleted = True
        suffix = f".{uuid.uuid4().hex}{DELETE_SUFFIX}"
        doomed = self.directory.with_name(self.directory.name[: _MAX_NAME - len(suffix)] + suffix)
        try:
            os.rename(self.directory, doomed)
            fsync_dir(self.directory.parent)
        except FileNotFoundError:
            return
        except OSError:
            if not doomed.exists():
                shutil.rmtree(self.directory, ignore_errors=True)
                return
        if self._holders:
            self._doomed = doomed
        else:
            shutil.rmtree(doomed, ignore_errors=True)

    def hold(self) -> None:
        """A compaction pass writes into this log's directory until ``release``."""
        self._holders += 1

    def release(self) -> None:
        self._holders -= 1
        if not self._holders and self._doomed is not None:
            shutil.rmtree(self._doomed, ignore_errors=True)
            self._doomed = None

    # -- state ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def high_watermark(self) -> int:
        if not self.replicated:
            return self._end_offset
        return min(max(self._high_watermark, self._start_offset), self._end_offset)

    @property
    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        unstable = self.producer_state.first_unstable_offset()
        return hw if unstable is None else max(min(hw, unstable), self._start_offset)

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of each open transaction."""
        return self.producer_state.ongoing_transactions()

    def aborted_in_read(self, offset: int, stop: int) -> list[tuple[int, int]]:
        """The aborted transactions a read from ``offset`` bounded by ``stop`` may meet:
        read() serves one segment, so the range ends at the next segment's base."""
        i = self._segment_index(offset)
        upper = min(stop, self._bases[i + 1]) if i + 1 < len(self._bases) else stop
        return self.aborted_transactions(offset, upper)

    def aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [start, upper), as Kafka's collectAbortedTransactions finds them."""
        out: list[tuple[int, int]] = []
        for seg in self.segments[self._segment_index(start) :]:
            found, complete = seg.txn_index.collect(start, upper)
            out.extend((e.producer_id, e.first_offset) for e in found)
            if complete:
                break
        return out

    def set_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (at most the log end); it never
        moves back except by truncation. True when it moved."""
        offset = min(offset, self._end_offset)
        if offset <= self.stored_high_watermark:
            return False
        self._high_watermark = offset
        return True

    def restore_high_watermark(self, offset: int) -> None:
        """The high watermark read back from the checkpoint at start (at most the end)."""
        self._high_watermark = max(0, min(offset, self._end_offset))

    @property
    def stored_high_watermark(self) -> int:
        """The high watermark as set, whether or not the log is replicated yet."""
        return min(max(self._high_watermark, self._start_offset), self._end_offset)

    @property
    def size_bytes(self) -> int:
        return self._closed_size + self.active.size

    @property
    def dirty(self) -> bool:
        return self.durable_seq < self.append_seq

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes
        if config.key_versioning == (self.versioning is not None) or self.closed:
            return
        if self.versioning is not None:
            versioning, self.versioning = self.versioning, None
            versioning.disable()
            return
        self.versioning = KeyVersioning(self)
        self.versioning.enable()

    # -- append -----------------------------------------------------------------------------
    def append(
        self,
        batch: bytearray,
        header: BatchHeader,
        now_ms: int,
        prepare: Prepare | None = None,
    ) -> AppendResult:
        """Append one validated client batch: idempotence check, roll if due, stamp the
        base offset (and LogAppendTime), one write. No fsync unless flush.messages says.
        Raises KafkaStorageError, with nothing of the batch kept, if the write fails.
        On a topic with key.versioning.enable (or with ``prepare``) the batch goes through
        ``prepare`` after the duplicate check (a retried duplicate is answered with its
        original offsets, never checked again): by default the version check and stamp,
        which raises VersionError to refuse the whole batch."""
        if self.offline is not None:
            raise self._offline_error()
        if header.producer_id >= 0:
            try:
                duplicate = self.producer_state.check(header)
            except ProducerStateError as exc:
                if exc.code == OUT_OF_ORDER_SEQUENCE_NUMBER and self._write_failure is not None:
                    # The gap is the batch a failed write refused: the storage error
                    # again, so the client retries in order rather than starting a new
                    # producer epoch (and sending again what may be written).
                    raise KafkaStorageError(
                        f"partition {self.name}: write failed: {self._write_failure}"
                    ) from None
                raise
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset, duplicate.last_offset, -1, self._start_offset, True
                )
        stamped = None
        versioning = self.versioning
        if versioning is not None or prepare is not None:
            if prepare is None:
                assert versioning is not None
                prepare = versioning.stamp
            stamped = prepare(batch, header)
            batch, header = stamped.batch, stamped.header
        result = self._append(batch, header, now_ms)
        if header.producer_id >= 0:
            self.producer_state.update(header, result.base_offset, now_ms)
        if stamped is not None and versioning is not None:
            versioning.appended(stamped, result.base_offset)
        return result

    # -- key versions (key.versioning.enable) -----------------------------------------------
    @property
    def key_index(self) -> KeyIndex | None:
        """The per-key version index; None when the topic does not opt in, or until it
        could be opened."""
        return self.versioning.index if self.versioning is not None else None

    @property
    def key_floor(self) -> int:
        """0, or the offset below which keys' counts are still to be copied from the
        leader (a follower that started over there)."""
        return self.versioning.floor if self.versioning is not None else 0

    def key_counts_below(
        self, below: int, after: bytes | None, limit: int
    ) -> list[tuple[bytes, int]]:
        """The leader's side of that copy (KeyIndex.counts_below); raises
        KafkaStorageError if the index cannot be brought up to the log. Empty when the
        topic does not opt in."""
        if self.versioning is None:
            return []
        return self.versioning.counts_below(below, after, limit)

    def raise_key_counts(self, counts: list[tuple[bytes, int]], done: bool) -> None:
        """The follower's side: counts copied from the leader (KeyIndex.raise_counts)."""
        if self.versioning is not None:
            self.versioning.raise_counts(counts, done)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> AppendResult:
        """Write a transaction's commit or abort marker, ending the producer's open
        transaction here; an abort goes into the segment's transaction index. Raises
        ProducerStateError for a fenced producer or coordinator epoch, KafkaStorageError
        if the write fails (nothing kept)."""
        if self.offline is not None:
            raise self._offline_error()
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = build_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)
        result = self._append(batch, read_header(batch), now_ms)
        done = self.producer_state.complete(
            producer_id, producer_epoch, coordinator_epoch, result.base_offset, now_ms, not commit
        )
        self._record_abort(done, self.producer_state)
        return result

    def _record_abort(self, done: CompletedTxn, producers: ProducerStateManager) -> None:
        """Index an aborted transaction; a failed index write is logged, not raised: the
        marker is in the log, and recovery puts the entry back from it."""
        if not done.aborted:
            return
        try:
            self._index_aborted(done, producers.last_stable_offset_after(done))
        except OSError as exc:
            log.warning(
                "partition %s: aborted transaction at %d not indexed: %s",
                self.name,
                done.last_offset,
                _reason(exc),
            )

    def _append(self, batch: bytearray, header: BatchHeader, now_ms: int) -> AppendResult:
        base = self._end_offset
        last = base + header.last_offset_delta
        seg = self.active
        try:
            if self._should_roll(seg, len(batch), header, last, now_ms):
                seg = self._roll(now_ms)
        except OSError as exc:
            raise self._storage_error(exc) from None
        stamp_base_offset(batch, base)
        epoch = self.leader_epoch
        if epoch >= 0:
            # partitionLeaderEpoch lies outside the CRC, like the base offset.
            _EPOCH.pack_into(batch, _EPOCH_AT, epoch)
            header = header._replace(partition_leader_epoch=epoch)
            try:
                self.epochs.assign(epoch, base)
            except OSError as exc:
                raise self._storage_error(exc) from None
        append_time = -1
        if self.config.log_append_time:
            set_log_append_time(batch, now_ms)
            append_time = now_ms
            header = header._replace(
                attributes=header.attributes | TIMESTAMP_TYPE_BIT, max_timestamp=now_ms
            )
        header = header._replace(base_offset=base)
        try:
            position = seg.append(batch, header)
        except OSError as exc:
            raise self._storage_error(exc) from None
        # Where the batch lies: the followers' and tailing consumers' next fetches start
        # at it, and find it without an index lookup and a header scan.
        hints = self._read_hints
        hints[base] = (seg, position)
        if len(hints) > _READ_HINTS:
            hints.popitem(last=False)
        if self._write_failure is not None:
            self._write_failure = None
            log.info("partition %s: writes resumed", self.name)
        self._end_offset = last + 1
        self.append_seq += 1
        self._unflushed_messages += header.records_count
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now_ms
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()
        return AppendResult(base, last, append_time, self._start_offset)

    # Internal writers (the group coordinator) append batches they built the same way.
    append_batch_bytes = append

    # -- replication (follower side) --------------------------------------------------------
    def append_replicated(self, data: bytes | bytearray | memoryview, now_ms: int) -> int:
        """Append a leader's batches as they are (offsets, epochs and timestamps already
        set): each header is checked (magic 2, length, CRC) and offsets must not go back;
        a torn last batch is left out. Rolls as append() does, one write per segment;
        producer state and leader epochs follow each batch (duplicates are the leader's
        call, not refused). Returns the new end offset. Raises ValueError for a bad batch
        or offsets below the end (nothing appended), KafkaStorageError if a write fails
        (that write cut back; batches written before it stay)."""
        if self.offline is not None:
            raise self._offline_error()
        view = memoryview(data)
        batches = self._replicated_batches(view)
        if not batches:
            return self._end_offset
        if self.versioning is not None:
            self.versioning.ready()
        first = batches[0][1]
        if first.base_offset < self._end_offset:
            # Kafka's way out for an empty log whose start (the leader's log start offset,
            # moved by DeleteRecords) lies inside the leader's first batch.
            if self._end_offset != self._start_offset or first.last_offset < self._end_offset:
                raise ValueError(
                    f"partition {self.name}: replicated batch at offset {first.base_offset} "
                    f"is below the log end offset {self._end_offset}"
                )
            self.start_over_at_leader_start(first.base_offset)
        seg = self.active
        run: list[tuple[int, BatchHeader]] = []
        run_start = run_bytes = 0
        run_first_ts: int | None = None
        try:
            for rel, header in batches:
                if self._should_roll(
                    seg, header.size, header, header.last_offset, now_ms, run_bytes, run_first_ts
                ):
                    if run:
                        self._write_run(seg, view[run_start:rel], run, run_start)
                    try:
                        seg = self._roll(now_ms)
                    except OSError as exc:
                        raise self._storage_error(exc) from None
                    run, run_start, run_bytes, run_first_ts = [], rel, 0, None
                if header.partition_leader_epoch >= 0:
                    try:
                        self.epochs.assign(header.partition_leader_epoch, header.base_offset)
                    except OSError as exc:
                        raise self._storage_error(exc) from None
                run.append((rel, header))
                run_bytes += header.size
                if run_first_ts is None:
                    run_first_ts = header.max_timestamp
            if run:
                end = run[-1][0] + run[-1][1].size
                self._write_run(seg, view[run_start:end], run, run_start)
        except KafkaStorageError:
            # Epochs assigned to batches that were not written go with them.
            self.epochs.truncate_from_end(self._end_offset)
            raise
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()
        return self._end_offset

    def _replicated_batches(self, view: memoryview) -> list[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch of a leader's fetch response data."""
        out: list[tuple[int, BatchHeader]] = []
        size = len(view)
        pos = 0
        last = -1
        while pos + HEADER_SIZE <= size:
            header = read_header(view, pos)
            if header.magic != 2:
                raise ValueError(f"replicated batch with magic {header.magic}")
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.last_offset_delta < 0:
                raise ValueError(f"replicated batch with length {header.batch_length}")
            if pos + header.size > size:
                break  # cut by the leader's max bytes: fetched again next time
            if not check_crc(view, header, pos):
                raise ValueError(f"replicated batch at offset {header.base_offset}: bad CRC")
            if header.base_offset <= last:
                raise ValueError(
                    f"replicated batch at offset {header.base_offset} follows offset {last}"
                )
            out.append((pos, header))
            last = header.last_offset
            pos += header.size
        return out

    def _write_run(
        self,
        seg: LogSegment,
        chunk: memoryview,
        run: list[tuple[int, BatchHeader]],
        run_start: int,
    ) -> None:
        headers = [(rel - run_start, header) for rel, header in run]
        try:
            seg.append_batches(chunk, headers)
        except OSError as exc:
            raise self._storage_error(exc) from None
        if self._write_failure is not None:
            self._write_failure = None
            log.info("partition %s: writes resumed", self.name)
        self._end_offset = run[-1][1].last_offset + 1
        self.append_seq += 1
        records = 0
        producers = self.producer_state
        for rel, header in run:
            records += header.records_count
            if header.producer_id < 0:
                continue
            if not header.is_control:
                producers.update(header, header.base_offset, header.max_timestamp)
                continue
            try:
                kind, coordinator_epoch = read_marker(chunk, rel - run_start)
            except (InvalidMarker, ValueError):
                continue
            done = producers.complete_marker(header, kind, coordinator_epoch)
            self._record_abort(done, producers)
        self._unflushed_messages += records
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = _now_ms()
        if self.versioning is not None:
            self.versioning.replicated(
                (chunk[rel - run_start : rel - run_start + h.size] for rel, h in run),
                run[0][1].base_offset,
            )

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (from the start of the batch that
        holds it): later segments are deleted, newest first, then the segment holding it
        is cut, indexes included, and fsynced. Producer state is rebuilt, leader epochs
        from the new end dropped, the high watermark lowered to the end if above it.
        Only the epoch cache is cut if ``offset`` is at or past the end. A failure takes
        the partition offline (KafkaStorageError); the restart recovers it."""
        if offset < 0:
            raise ValueError(f"cannot truncate to offset {offset}")
        if offset >= self._end_offset:
            # A conflicting epoch entry may still sit at the end (Kafka does the same).
            self.epochs.truncate_from_end(offset)
            return
        if self.offline is not None:
            raise self._offline_error()
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return
        i = self._segment_index(offset)
        seg = self.segments[i]
        found = seg.find(offset)
        if found is None:
            position, new_end = seg.size, offset  # in a gap after the segment's last batch
        else:
            position, new_end = found[0], min(offset, found[1].base_offset)
        doomed = self.segments[i + 1 :]
        self.segment_drops += 1
        self._read_hints.clear()
        removed = sum(s.size for s in doomed) + seg.size - position
        try:
            for old in reversed(doomed):
                old.delete()
            if doomed:
                fsync_dir(self.directory)
            seg.truncate_to(position)
            seg.txn_index.truncate_to(new_end)
        except OSError as exc:
            self.sync_failed(exc)
            raise self._offline_error() from None
        finally:
            self._set_segments([s for s in self.segments[: i + 1]])
        # A batch straddling the log start (DeleteRecords inside it) goes whole, but the
        # offsets below the start stay used: the log goes on at the start, or at
        # ``offset`` if that is lower, as Kafka's (logStartOffset = min(target, start)).
        lowest = min(offset, self._start_offset)
        new_end = max(new_end, lowest)
        self._end_offset = new_end
        if self._start_offset > lowest:
            self._start_offset = lowest
            with contextlib.suppress(OSError):
                log_start.write(self.directory, lowest)
        self._after_truncation(new_end)
        log.info(
            "partition %s: truncated to offset %d (%d bytes removed)", self.name, new_end, removed
        )

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower whose
        log ends below its leader's log start offset). A failure takes the partition
        offline (KafkaStorageError)."""
        if offset < 0:
            raise ValueError(f"cannot start a log at offset {offset}")
        if self.offline is not None:
            raise self._offline_error()
        self.segment_drops += 1
        old = list(self.segments)
        try:
            # The start offset first: with it on disk, whatever a crash leaves of the old
            # segments is read from no earlier than ``offset``.
            log_start.write(self.directory, offset)
            for seg in reversed(old):
                seg.delete()
            self.segments = []
            seg = LogSegment.create(
                self.directory, offset, self.config.index_interval_bytes, _now_ms()
            )
            fsync_dir(self.directory)
        except OSError as exc:
            self.sync_failed(exc)
            raise self._offline_error() from None
        self._set_segments([seg])
        self._start_offset = self._end_offset = offset
        for snap in self.producer_state.snapshot_offsets():
            snapshot_path(self.directory, snap).unlink(missing_ok=True)
        self.producer_state.producers = {}
        self.epochs.clear()
        self._after_truncation(offset)
        log.info("partition %s: emptied, starts at offset %d", self.name, offset)

    def start_over_at_leader_start(self, offset: int) -> None:
        """A follower's truncate_fully_and_start_at: its log ended below its leader's log
        start. Keys whose records all lay below ``offset`` keep their counts only in the
        leader's index: key_floor asks for them to be copied from there
        (cluster.replica_fetcher) before this replica fetches on."""
        self.truncate_fully_and_start_at(offset)
        if offset > 0 and self.versioning is not None:
            self.versioning.set_floor(offset)

    def _after_truncation(self, new_end: int) -> None:
        if self.versioning is not None:
            self.versioning.cut(new_end, self._start_offset)
        if self.producer_state.producers or self.producer_state.snapshot_offsets():
            self._recover_producer_state()
        self.epochs.truncate_from_end(new_end)
        self._high_watermark = min(self._high_watermark, new_end)
        self._compacted_through = min(self._compacted_through, self.active.base_offset)
        # What is left was fsynced by the truncation.
        self.durable_seq = self.append_seq
        self._unflushed_messages = 0
        self._first_unflushed_ms = None

    def _should_roll(
        self,
        seg: LogSegment,
        size: int,
        header: BatchHeader,
        last: int,
        now_ms: int,
        pending: int = 0,
        pending_first_ts: int | None = None,
    ) -> bool:
        """``pending`` bytes (the first of them with timestamp ``pending_first_ts``) are
        about to be written to ``seg`` ahead of this batch, in the same write."""
        if not seg.active:
            return True  # an earlier roll sealed it but could not start the next segment
        if seg.size + pending == 0:
            return False
        cfg = self.config
        if seg.size + pending + size > cfg.segment_bytes:
            return True
        # Room for one more entry in each index (entries times the entry size: their
        # size_bytes, without a property call on every append).
        index, time_index = seg.index, seg.time_index
        if (index.entries + 1) * index.ENTRY.size > cfg.segment_index_bytes:
            return True
        if (time_index.entries + 1) * time_index.ENTRY.size > cfg.segment_index_bytes:
            return True
        if last - seg.base_offset > _MAX_RELATIVE_OFFSET:
            return True
        # Kafka's timeWaitedForRoll: measured in record time from the segment's first batch.
        first = seg.first_batch_timestamp if seg.size else pending_first_ts
        if first is not None and first >= 0:
            waited = header.max_timestamp - first
        else:
            waited = now_ms - seg.created_ms
        return waited > cfg.segment_ms

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Close the active segment (fsynced) and start a new one at end_offset; raises
        KafkaStorageError if that fails."""
        if self.offline is not None:
            raise self._offline_error()
        try:
            return self._roll(_now_ms() if now_ms is None else now_ms)
        except OSError as exc:
            raise self._storage_error(exc) from None

    def _roll(self, now_ms: int) -> LogSegment:
        old = self.active
        if old.size == 0 and old.active:
            return old
        # Sealed first, so a failure below leaves a sealed last segment that the next
        # append rolls again (see _should_roll); a failed seal leaves it active.
        old.seal()
        seg = LogSegment.create(
            self.directory, self._end_offset, self.config.index_interval_bytes, now_ms
        )
        # The producer state snapshot is written first so that one directory fsync makes
        # both names durable.
        snapshot_error: OSError | None = None
        try:
            self.producer_state.take_snapshot(self._end_offset)
        except OSError as exc:
            snapshot_error = exc
        try:
            fsync_dir(self.directory)
        except OSError:
            seg.delete()
            raise
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._closed_size += old.size
        # Everything before the roll is now on disk.
        self.durable_seq = self.append_seq
        self._unflushed_messages = 0
        self._first_unflushed_ms = None
        try:
            if snapshot_error is not None:
                raise snapshot_error
            self.producer_state.delete_snapshots_below(self._end_offset)
        except OSError as exc:
            # Only a shortcut for recovery, which replays from an older snapshot instead.
            log.warning(
                "partition %s: producer state snapshot at offset %d not written: %s",
                self.name,
                self._end_offset,
                _reason(exc),
            )
        return seg

    # -- storage errors ---------------------------------------------------------------------
    def _storage_error(self, exc: OSError) -> KafkaStorageError:
        """Log a failed write or fsync once per change of state; the error to answer with."""
        reason = _reason(exc)
        self._read_hints.clear()
        if isinstance(exc, SyncFailed):
            self.sync_failed(exc)
            return self._offline_error()
        if reason != self._write_failure:
            self._write_failure = reason
            until = (
                "until space is available"
                if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                else "until a write succeeds"
            )
            log.error(
                "partition %s: write failed: %s; appends refused %s", self.name, reason, until
            )
        return KafkaStorageError(f"partition {self.name}: write failed: {reason}")

    def sync_failed(self, exc: OSError) -> None:
        """An fsync of this log failed: take the partition offline for writes."""
        if self.offline is not None:
            return
        self.offline = _reason(exc)
        log.error(
            "partition %s: fsync failed: %s; what is on disk is unknown, so the partition "
            "takes no writes until a restart recovers it",
            self.name,
            self.offline,
        )
        if self.on_offline is not None:
            self.on_offline(self)

    def _offline_error(self) -> KafkaStorageError:
        return KafkaStorageError(
            f"partition {self.name} is offline after a failed fsync ({self.offline})"
        )

    # -- durability -------------------------------------------------------------------------
    def flush(self) -> None:
        """fsync the active segment; raises KafkaStorageError (and goes offline) on failure."""
        if self.offline is not None:
            raise self._offline_error()
        seq = self.append_seq
        try:
            self.active.flush()
        except OSError as exc:
            raise self._storage_error(exc) from None
        self.durable_seq = max(self.durable_seq, seq)
        self._unflushed_messages = 0
        self._first_unflushed_ms = None

    def sync_target(self) -> tuple[int, LogSegment]:
        """What an fsync started now covers, and the segment to fsync (group commit)."""
        return self.append_seq, self.active

    def mark_durable(self, seq: int) -> None:
        if seq > self.durable_seq:
            self.durable_seq = seq
        if self.durable_seq >= self.append_seq:
            self._unflushed_messages = 0
            self._first_unflushed_ms = None

    def maybe_flush(self, now_ms: int) -> bool:
        """fsync if unflushed data is older than flush.ms (for a periodic broker task)."""
        first = self._first_unflushed_ms
        if (
            self.offline is None
            and first is not None
            and (now_ms - first >= self.config.flush_interval_ms)
        ):
            try:
                self.flush()
            except KafkaStorageError:
                return False  # logged once by the partition
            return True
        return False

    # -- read -------------------------------------------------------------------------------
    def _segment_index(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(
        self, offset: int, max_bytes: int, min_one: bool = True, max_offset: int | None = None,
        region: bool = False,
    ) -> bytes | FileRegion:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``, from a single
        segment, in one pread. With ``min_one`` a first batch larger than ``max_bytes``
        is returned whole (KIP-74); without, nothing is. No batch at or after
        ``max_offset`` (a consumer's high watermark, always a batch boundary) is read.
        With ``region`` the batches are not read but named (a FileRegion, for sendfile);
        nothing is still b""."""
        end = self._end_offset
        if offset == end or (max_offset is not None and offset >= max_offset):
            return b""
        if offset < self._start_offset or offset > end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start_offset}, {end}]")
        # Kept after use: every follower of the partition fetches the same offsets.
        hint = self._read_hints.get(offset)
        if (
            hint is not None
            and (hint[0] is self.segments[-1] or hint[0] in self.segments)
            and hint[1] < hint[0].size
        ):
            seg, pos = hint
        else:
            found = self._locate(offset)
            if found is None:
                return b""
            seg, pos = found
        if max_offset is not None and max_offset < end:
            bound = self._locate(max_offset)
            if bound is not None and bound[0] is seg:
                max_bytes = min(max_bytes, bound[1] - pos)
        stop = seg.whole_batches_end(pos, pos + max(max_bytes, 0))
        if stop == pos:
            if not min_one:
                self._hint(offset, seg, pos)
                return b""
            stop = pos + next(seg.headers_from(pos))[1].size
        if stop + HEADER_SIZE <= seg.size:
            # The next batch's header names where the next sequential fetch starts, which
            # then skips the index lookup. Read with the data when the data is read (one
            # pread, the data then copied out of it), on its own when it is not.
            if region:
                next_base = read_header(seg.read(stop, HEADER_SIZE), 0).base_offset
                self._hint(next_base, seg, stop)
                return FileRegion(seg.file, pos, stop - pos)
            buf = seg.read(pos, stop - pos + HEADER_SIZE)
            self._hint(read_header(buf, stop - pos).base_offset, seg, stop)
            return buf[: stop - pos]
        if region:
            return FileRegion(seg.file, pos, stop - pos)
        return seg.read(pos, stop - pos)

    def _hint(self, offset: int, seg: LogSegment, position: int) -> None:
        self._read_hints[offset] = (seg, position)
        while len(self._read_hints) > _READ_HINTS:
            self._read_hints.popitem(last=False)

    def _locate(self, offset: int) -> tuple[LogSegment, int] | None:
        i = self._segment_index(offset)
        for seg in self.segments[i:]:
            found = seg.find(offset)
            if found is not None:
                return seg, found[0]
        return None

    def batch_at(self, offset: int) -> tuple[bytes, int] | None:
        """(bytes, last offset) of the batch holding ``offset``, or of the first one after
        it (the offset was removed by compaction); None past the last batch."""
        if offset >= self._end_offset:
            return None
        offset = max(offset, self._start_offset)
        for seg in self.segments[self._segment_index(offset) :]:
            found = seg.find(offset)
            if found is not None:
                pos, header = found
                return seg.read(pos, header.size), header.last_offset
        return None

    def batches_from(self, offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, position, header) of every batch from the one holding ``offset``."""
        i = self._segment_index(offset)
        for seg in list(self.segments[i:]):
            start = 0
            if seg.base_offset <= offset:
                found = seg.find(offset)
                if found is None:
                    continue
                start = found[0]
            for pos, header in seg.headers_from(start):
                yield seg, pos, header

    # -- timestamps -------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ``timestamp_ms`` at or
        after the log start offset; None if there is none (ListOffsets by timestamp)."""
        for seg in self.segments:
            if seg.size == 0 or seg.max_timestamp < timestamp_ms:
                continue
            _, ts_offset = seg.time_index.lookup(timestamp_ms)
            _, start = seg.index.lookup(max(ts_offset, self._start_offset))
            for pos, header in seg.headers_from(start):
                if header.max_timestamp < timestamp_ms or header.last_offset < self._start_offset:
                    continue
                batch = seg.read(pos, header.size)
                for rec in iter_records(batch):
                    if rec.timestamp >= timestamp_ms and rec.offset >= self._start_offset:
                        return rec.offset, rec.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(largest timestamp, offset of the first record carrying it), (-1, -1) when empty
        (ListOffsets MAX_TIMESTAMP, -3)."""
        best_ts, best_last = -1, -1
        for seg in self.segments:
            if seg.size and seg.max_timestamp > best_ts:
                best_ts, best_last = seg.max_timestamp, seg.offset_of_max_timestamp
        if best_ts < 0 or best_last < self._start_offset:
            return -1, -1
        seg = self.segments[self._segment_index(best_last)]
        found = seg.find(best_last)
        if found is None:
            return best_ts, best_last
        pos, header = found
        for rec in iter_records(seg.read(pos, header.size)):
            if rec.timestamp == best_ts:
                return best_ts, rec.offset
        return best_ts, best_last

    # -- retention --------------------------------------------------------------------------
    def apply_retention(self, now_ms: int) -> int:
        """Delete whole segments past retention.ms (by their largest timestamp) or beyond
        retention.bytes, and any wholly below the log start offset. Returns how many.
        As Kafka's deletableSegments, retention takes only segments wholly below the high
        watermark: records the ISR does not hold yet are never deleted by age or size."""
        cfg = self.config
        doomed = 0
        # Segments entirely below the log start offset (DeleteRecords) go in any case.
        while doomed < len(self.segments) - 1 and self._bases[doomed + 1] <= self._start_offset:
            doomed += 1
        if cfg.delete:
            hw = self.high_watermark
            # How many oldest segments lie wholly below the high watermark.
            below = 0
            while below < len(self.segments) - 1 and self._bases[below + 1] <= hw:
                below += 1
            if cfg.retention_ms >= 0:
                while (
                    doomed < below
                    and now_ms - self.segments[doomed].max_timestamp > cfg.retention_ms
                ):
                    doomed += 1
                active = self.active
                if (
                    doomed == len(self.segments) - 1
                    and active.size
                    and hw >= self._end_offset
                    and now_ms - active.max_timestamp > cfg.retention_ms
                ):
                    try:
                        self.roll(now_ms)  # Kafka rolls an expired active segment to delete it
                        doomed += 1
                    except KafkaStorageError:
                        pass  # logged once; the next check tries again
            if cfg.retention_bytes >= 0:
                excess = self.size_bytes - cfg.retention_bytes
                excess -= sum(s.size for s in self.segments[:doomed])
                while doomed < below and excess - self.segments[doomed].size >= 0:
                    excess -= self.segments[doomed].size
                    doomed += 1
        if doomed:
            self._delete_oldest(doomed)
        self.producer_state.expire(now_ms, cfg.producer_id_expiration_ms)
        return doomed

    def _delete_oldest(self, count: int) -> None:
        self.segment_drops += 1
        gone = self.segments[:count]
        self._set_segments(self.segments[count:])
        new_start = self._bases[0]
        if new_start > self._start_offset:
            self._start_offset = new_start
            # A failure is harmless: at open the start is at least the first base offset.
            with contextlib.suppress(OSError):
                log_start.write(self.directory, new_start)
        for seg in gone:
            seg.delete()
        self.producer_state.delete_snapshots_below(self._start_offset)
        if self.versioning is not None:
            self.versioning.start_moved(self._start_offset)

    def delete_records(self, before_offset: int) -> int:
        """Advance the log start offset (DeleteRecords); -1 means the end offset."""
        if before_offset == -1:
            before_offset = self._end_offset
        if before_offset < 0 or before_offset > self._end_offset:
            raise OffsetOutOfRange(
                f"offset {before_offset} is outside [{self._start_offset}, {self._end_offset}]"
            )
        if before_offset > self._start_offset:
            try:
                log_start.write(self.directory, before_offset)
            except OSError as exc:
                raise self._storage_error(exc) from None
            self._start_offset = before_offset
            if self.versioning is not None:
                self.versioning.start_moved(self._start_offset)
            if self._start_offset == self._end_offset and self.active.size:
                # If the roll fails the records are below the start offset all the same.
                with contextlib.suppress(KafkaStorageError):
                    self.roll()
            doomed = 0
            while doomed < len(self.segments) - 1 and self._bases[doomed + 1] <= self._start_offset:
                doomed += 1
            if doomed:
                self._delete_oldest(doomed)
        return self._start_offset

    # -- compaction -------------------------------------------------------------------------
    def compact(self, now_ms: int | None = None) -> int:
        """Keep only the latest record per key in the closed segments (offsets preserved);
        returns the bytes saved. Synchronous: run it where appends to this log are not."""
        return compact(self, _now_ms() if now_ms is None else now_ms)

    def maybe_compact(self, now_ms: int) -> int:
        """Compact a compact-policy log when segments rolled since its last compaction."""
        job = self.compaction_job(now_ms)
        return job.run().install() if job is not None else 0

    def compaction_job(self, now_ms: int) -> CompactionJob | None:
        """A compaction to run (``job.run()`` on a worker thread, then ``job.install()``
        here), or None when segments have not rolled since the last one or the cleaner
        settings say it is not due yet."""
        if (
            self.closed
            or not self.config.compact
            or self.active.base_offset <= self._compacted_through
        ):
            return None
        job = CompactionJob(self, now_ms)
        return job.pin() if job.due(self._compacted_through) else None

    def compacted_through(self, offset: int) -> None:
        """Compaction cleaned the log below ``offset``."""
        self._compacted_through = max(self._compacted_through, offset)
        if self.versioning is not None:
            self.versioning.compacted(offset)

    def replace_segments(self, old: list[LogSegment], new: list[LogSegment]) -> None:
        """Swap closed segments for their compacted versions (same offset range)."""
        i = self.segments.index(old[0])
        assert self.segments[i : i + len(old)] == old and self.active not in old
        self._set_segments(self.segments[:i] + new + self.segments[i + len(old) :])
