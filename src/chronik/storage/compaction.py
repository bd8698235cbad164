# Log compaction (cleanup.policy=compact): rewrite closed segments keeping, per key, only
# the record with the highest offset, with offsets preserved.
#
# Files while a segment is being replaced, for base offset B:
#   {B:020d}.log.cleaned, .index.cleaned, .timeindex.cleaned   being written
#   {B:020d}.index.swap, .timeindex.swap, then .log.swap       complete and fsynced;
#                                                               .log.swap is the commit point
# At open, a .log.swap finishes its swap (its .swap files replace the segment's files);
# .cleaned files, and .swap index files without a .log.swap, are leftovers and deleted.
#
# Batches whose records are all kept are copied byte for byte; others are re-encoded
# with the same base offset, offset deltas, codec, timestamps and producer fields.
# The rewrite runs on a worker thread: it pins each segment's .log open while it scans it
# (chronik.storage.file_cache), so retention deleting that segment meanwhile, or the event
# loop evicting its descriptor, cannot close it under the reader.
# Records without a key are kept. Tombstones (null value) are dropped once their batch
# is older than delete.retention.ms. Control batches are copied as they are.
# Scheduling follows Kafka's cleaner: min.compaction.lag.ms, min.cleanable.dirty.ratio and
# max.compaction.lag.ms decide which segments and when (CompactionJob.due).
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from chronik.records.batch import TIMESTAMP_TYPE_BIT, BatchHeader
from chronik.records.builder import Record, build_batch
from chronik.records.reader import CorruptRecords, iter_records
from chronik.storage.segment import LogSegment, segment_name

if TYPE_CHECKING:
    from chronik.storage.partition_log import PartitionLog

_SUFFIXES = (".index", ".timeindex", ".log")  # the log last: its rename commits the swap


def finish_interrupted_swaps(directory: Path) -> None:
    for leftover in directory.glob("*.cleaned"):
        leftover.unlink()
    committed = {p.name[: -len(".log.swap")] for p in directory.glob("*.log.swap")}
    for swap in sorted(directory.glob("*.swap")):
        stem = swap.name.split(".", 1)[0]
        if stem in committed:
            os.replace(swap, swap.with_name(swap.name[: -len(".swap")]))
        else:
            swap.unlink()


def latest_offsets(segments: list[LogSegment]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in segments:
        with seg.file:
            for pos, header in seg.headers_from(0):
                if header.is_control:
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
    seg: LogSegment, latest: dict[bytes, int], now_ms: int, delete_retention_ms: int
) -> int:
    """Write the compacted copy of ``seg`` as .cleaned files, then move them to .swap.
    Returns how many bytes it saves (0: nothing to do, no files left behind)."""
    directory = seg.directory
    drop_tombstones = now_ms - seg.max_timestamp > delete_retention_ms
    out_path = directory / (segment_name(seg.base_offset, ".log") + ".cleaned")
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    try:
        with seg.file:
            for pos, header in seg.headers_from(0):
                data = seg.read(pos, header.size)
                if not header.is_control:
                    data = _rewrite_batch(data, header, latest, drop_tombstones)
                if data:
                    os.write(fd, data)
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
    cleaned.rebuild_indexes()
    cleaned.close()
    for suffix in _SUFFIXES:
        name = segment_name(seg.base_offset, suffix)
        os.replace(directory / (name + ".cleaned"), directory / (name + ".swap"))
    return seg.size - written


class CompactionJob:
    """One compaction of a log, in two steps: ``run`` writes the compacted copies of the
    closed segments (file I/O only, safe on a worker thread while the log keeps serving),
    then ``install`` swaps them in on the thread that owns the log."""

    def __init__(self, log: PartitionLog, now_ms: int) -> None:
        self.log = log
        closed = list(log.segments[:-1])
        # min.compaction.lag.ms: as Kafka, a segment holding a record younger than the lag,
        # and every segment after it, stays as written (and adds nothing to the key map).
        lag = log.config.min_compaction_lag_ms
        cut = next(
            (i for i, seg in enumerate(closed) if lag and seg.max_timestamp > now_ms - lag),
            len(closed),
        )
        self.segments = closed[:cut]
        self.through = closed[cut].base_offset if cut < len(closed) else log.active.base_offset
        self.now_ms = now_ms
        self.delete_retention_ms = log.config.delete_retention_ms
        self.swapped: list[LogSegment] = []
        self.saved = 0

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

    def run(self) -> CompactionJob:
        if not self.segments:
            return self
        latest = latest_offsets(self.segments)
        for seg in self.segments:
            gain = clean_segment(seg, latest, self.now_ms, self.delete_retention_ms)
            if gain:
                self.saved += gain
                self.swapped.append(seg)
        if self.swapped:
            _fsync_dir(self.segments[0].directory)
        return self

    def install(self) -> int:
        """Swap the compacted segments in; ones the log dropped meanwhile (retention,
        DeleteRecords, a deleted topic) lose their prepared copies instead."""
        log = self.log
        replacements = []
        for seg in self.swapped:
            if log.closed or seg not in log.segments:
                _discard_swap(seg)
                continue
            for suffix in _SUFFIXES:
                name = segment_name(seg.base_offset, suffix)
                os.replace(seg.directory / (name + ".swap"), seg.directory / name)
            replacements.append(
                (
                    seg,
                    LogSegment.open_closed(
                        seg.directory, seg.base_offset, seg.index_interval_bytes
                    ),
                )
            )
        if replacements:
            _fsync_dir(log.directory)
        for old, new in replacements:
            log.replace_segments([old], [new])
            old.close()
        log.compacted_through(self.through)
        return self.saved


def _discard_swap(seg: LogSegment) -> None:
    # The log's swap file first: without it the index ones are leftovers, not a swap.
    for suffix in (".log", ".index", ".timeindex"):
        name = segment_name(seg.base_offset, suffix) + ".swap"
        (seg.directory / name).unlink(missing_ok=True)


def compact(log: PartitionLog, now_ms: int) -> int:
    """Compact every closed segment of ``log`` now; returns the bytes saved."""
    return CompactionJob(log, now_ms).run().install()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
