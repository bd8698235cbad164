# Opening a partition's log directory (Kafka's LogLoader): what a crash, a compaction pass
# or a DeleteRecords left on disk is brought to one consistent state, and read back,
# before chronik.storage.partition_log takes a write.
#
# On disk this module owns the clean-shutdown marker: `.clean-shutdown`, an empty file in
# the partition directory, present only between a close() that flushed everything and the
# next open. Its presence lets the open trust the last segment's indexes; it is removed
# (and the removal fsynced) before the first write, so a crash after the open is seen as
# unclean.
#
# Recovery at open: leftover *.tmp files are removed and interrupted compaction swaps
# finished (chronik.storage.compaction). Closed segments and their indexes are trusted (an
# index is rebuilt only if missing or of a torn size). Unless the clean-shutdown marker is
# present, the last segment's batches are all checked (header, CRC) and the file is cut at
# the first torn or corrupt one; its indexes are rebuilt (LogSegment.open_active). The
# saved log start offset (chronik.storage.log_start) is applied; one past the recovered
# end means the log starts over there, empty. Producer state comes from the newest
# snapshot plus a header scan of the batches after it (transaction markers read, and the
# aborted transactions they end put back in the .txnindex of their segment if a crash
# lost them). The leader epoch cache is cut to the recovered log (entries at or past its
# end, or below its start, go). The high watermark checkpoint is the data directory's and
# is read by the catalog (chronik.storage.catalog), not here.
from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

from chronik.records.batch import BatchHeader
from chronik.records.control import InvalidMarker, read_marker
from chronik.storage import log_start
from chronik.storage.compaction import finish_interrupted_swaps
from chronik.storage.config import LogConfig
from chronik.storage.diskio import fsync_dir
from chronik.storage.leader_epoch import LeaderEpochCache
from chronik.storage.producer_state import CompletedTxn, ProducerStateManager, snapshot_path
from chronik.storage.segment import LogSegment
from chronik.storage.txn_index import AbortedTxn

log = logging.getLogger("chronik.storage")

CLEAN_SHUTDOWN = ".clean-shutdown"


class LoadedLog(NamedTuple):
    segments: list[LogSegment]  # ascending base offsets, the last one active
    start_offset: int
    end_offset: int
    recovered_bytes_truncated: int  # cut from the last segment's tail
    clean: bool  # the clean-shutdown marker was found: forget_clean_shutdown() removes it


def load(
    directory: Path,
    config: LogConfig,
    producer_state: ProducerStateManager,
    epochs: LeaderEpochCache,
    *,
    created: bool,
    now_ms: int,
) -> LoadedLog:
    """Recover the existing directory ``directory`` (``created`` just now: its name is
    fsynced into its parent) and load ``producer_state`` and ``epochs`` to agree with it."""
    clean = (directory / CLEAN_SHUTDOWN).exists()
    for tmp in directory.glob("*.tmp"):
        tmp.unlink()
    finish_interrupted_swaps(directory)
    bases = sorted(int(p.name[:-4]) for p in directory.glob("*.log") if p.name[:-4].isdigit())
    interval = config.index_interval_bytes
    truncated = 0
    if not bases:
        segments = [LogSegment.create(directory, 0, interval, now_ms)]
        end = 0
        # acks=all fsyncs only the segment's data: its name, and the directory's,
        # must be on disk before the first append is answered.
        fsync_dir(directory)
        if created:
            fsync_dir(directory.parent)
    else:
        closed = [LogSegment.open_closed(directory, b, interval) for b in bases[:-1]]
        active, end, truncated = LogSegment.open_active(
            directory, bases[-1], interval, clean=clean, now_ms=now_ms
        )
        segments = [*closed, active]
    start = segments[0].base_offset
    saved = log_start.read(directory)
    if saved is not None:
        if saved > end:
            # DeleteRecords moved the start past what recovery kept (the tail after it
            # was torn): the log starts over there, empty, so that no offset handed out
            # before is handed out again.
            segments = [_start_over(directory, segments, saved, interval, producer_state, now_ms)]
            end = saved
        start = min(max(saved, start), end)
    if not clean:
        segments[-1].txn_index.truncate_to(end)
    rebuild_producer_state(producer_state, segments, [s.base_offset for s in segments], end)
    epochs.truncate_from_end(end)
    epochs.truncate_from_start(start)
    return LoadedLog(segments, start, end, truncated, clean)


def forget_clean_shutdown(directory: Path) -> None:
    """Gone before any new write, so a crash from here on is seen as unclean."""
    (directory / CLEAN_SHUTDOWN).unlink()
    fsync_dir(directory)


def _start_over(
    directory: Path,
    segments: list[LogSegment],
    offset: int,
    interval: int,
    producer_state: ProducerStateManager,
    now_ms: int,
) -> LogSegment:
    for seg in reversed(segments):
        seg.delete()
    seg = LogSegment.create(directory, offset, interval, now_ms)
    fsync_dir(directory)
    for snap in producer_state.snapshot_offsets():
        snapshot_path(directory, snap).unlink(missing_ok=True)
    log.warning(
        "partition %s: recovery kept less than the saved log start offset %d: the log "
        "starts over there, empty", directory.name, offset,
    )
    return seg


def rebuild_producer_state(
    producer_state: ProducerStateManager,
    segments: list[LogSegment],
    bases: list[int],
    end_offset: int,
) -> None:
    """Load the newest snapshot at or below ``end_offset`` and replay the batches after it
    (at open, and after a truncation); the aborted transactions met are indexed again."""
    snap = producer_state.load_latest(end_offset)
    from_offset = max(snap, bases[0]) if snap >= 0 else bases[0]
    if from_offset >= end_offset:
        return
    i = max(0, bisect_right(bases, from_offset) - 1)
    for seg in segments[i:]:
        found = seg.find(from_offset) if seg.base_offset <= from_offset else None
        start = found[0] if found else 0
        completed = producer_state.replay(
            (h, _marker_at(seg, pos, h))
            for pos, h in seg.headers_from(start)
            if h.base_offset >= from_offset
        )
        for done in completed:
            # The LSO as it was then is not known here; past the marker is a bound
            # that keeps the collect search going no further than it must.
            index_aborted(segments, bases, done, done.last_offset + 1)


def index_aborted(
    segments: list[LogSegment], bases: list[int], done: CompletedTxn, last_stable_offset: int
) -> None:
    """Put an aborted transaction in the .txnindex of the segment holding its marker
    (``bases``: the segments' base offsets)."""
    seg = segments[max(0, bisect_right(bases, done.last_offset) - 1)]
    seg.txn_index.append(
        AbortedTxn(done.producer_id, done.first_offset, done.last_offset, last_stable_offset)
    )


def _marker_at(seg: LogSegment, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    if not header.is_control or header.producer_id < 0:
        return None
    try:
        return read_marker(seg.read(pos, header.size))
    except (InvalidMarker, ValueError):
        return None
