"""Group commit for acks=all: fsyncs shared by every waiter, started the moment one is due.

A caller waits until an fsync that began after its append has completed. Appends are
numbered (PartitionLog.append_seq); an fsync started when the counter read N makes
everything up to N durable. A caller whose append no fsync in flight covers starts one at
once, beside those in flight (up to MAX_IN_FLIGHT per log; Linux lets fdatasyncs of one
file overlap, and the file system's journal commits them together), so an
acknowledgement costs one fsync, not the rest of an earlier one and then its own. That
holds while appends are sparse: the latest fsync covers at most OVERLAP_COVERS
callers, and fewer than OVERLAP_TOTAL fsyncs are in flight on the whole broker (with
many partitions taking appends, a fsync per batch of each would cost more CPU than
the waits it saves). Once they come faster than fsyncs, callers queue and share the
next fsync
started when one completes, as many per fsync as arrived meanwhile, so the fsyncs per
second stay those of the disk, not of the requests. The
fsyncs run on the committer's worker threads so the event loop keeps serving; a
completion resolves its waiters in one event-loop turn (no task per fsync, none per
waiter).

A roll fsyncs the sealed segment itself and marks the log durable up to the roll, so an
fsync in flight only ever needs the segment it was started on. The fsync pins that
segment's file (chronik.storage.file_cache), reopening it if it was evicted: an fsync on
any descriptor of a file flushes the file, and the pin keeps the event loop from closing
the descriptor under the worker thread. Fsyncs may complete out of order: the log's
durable mark only moves forward.

A failed fsync takes the log offline (PartitionLog.sync_failed): every caller still
waiting, and every later one, gets KafkaStorageError instead of an acknowledgement.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor

from chronik.storage.errors import KafkaStorageError
from chronik.storage.partition_log import PartitionLog
from chronik.storage.segment import LogSegment

# fsyncs of one log in flight at once; past this, waiters share the next one.
MAX_IN_FLIGHT = 4
# An fsync is started beside those in flight only while the latest one covered at most
# this many callers: appends that come faster than that share fsyncs instead.
OVERLAP_COVERS = 1
# ... and only while fewer fsyncs than this are in flight on all logs together.
OVERLAP_TOTAL = 2
# Worker threads for fsyncs: they wait on the disk, not the CPU.
FSYNC_THREADS = 8


class _LogSyncs:
    """One log's fsyncs in flight and the callers waiting for them."""

    __slots__ = ("in_flight", "started_seq", "covered", "waiters")

    def __init__(self) -> None:
        self.in_flight = 0
        self.started_seq = -1  # the append_seq the latest fsync started covers
        self.covered = 0  # callers the latest fsync covers
        # (append_seq to reach, future), in the order the appends were made.
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []



class GroupCommitter:
    def __init__(self, executor: Executor | None = None) -> None:
        self._executor = executor
        self._logs: dict[int, _LogSyncs] = {}
        self.fsyncs = 0  # fsyncs issued, for tests and metrics
        self.in_flight = 0  # fsyncs in flight on all logs
        self.on_fsync: Callable[[float], None] | None = None  # seconds each fsync took

    def _pool(self) -> Executor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="chronik-fsync")
        return self._executor

    def _may_start(self, state: _LogSyncs) -> bool:
        return state.in_flight == 0 or (
            state.in_flight < MAX_IN_FLIGHT
            and state.covered <= OVERLAP_COVERS
            and self.in_flight < OVERLAP_TOTAL
        )

    def durable_future(self, log: PartitionLog) -> asyncio.Future[None] | None:
        """A future done once everything appended to ``log`` so far is on disk (its
        exception KafkaStorageError if an fsync failed first), or None if it already is.
        Raises KafkaStorageError at once for a log already offline."""
        target = log.append_seq
        if log.durable_seq >= target or log.closed:
            return None
        if log.offline is not None:
            raise _offline(log)
        key = id(log)
        state = self._logs.get(key)
        if state is None:
            state = self._logs[key] = _LogSyncs()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.append((target, fut))
        if state.started_seq >= target:
            state.covered += 1  # the latest fsync covers this caller too
        elif self._may_start(state):
            self._start(log, state)
        return fut

    async def sync(self, log: PartitionLog) -> None:
        """Return once everything appended to ``log`` so far is on disk; raises
        KafkaStorageError if an fsync failed first."""
        fut = self.durable_future(log)
        if fut is not None:
            await fut

    def _start(self, log: PartitionLog, state: _LogSyncs) -> None:
        seq, segment = log.sync_target()
        covered = 0
        for target, _ in reversed(state.waiters):
            if target <= state.started_seq:
                break
            covered += 1
        state.covered = covered
        state.started_seq = seq
        state.in_flight += 1
        self.in_flight += 1
        self.fsyncs += 1
        loop = asyncio.get_running_loop()
        started = time.perf_counter()

        def done(job: Future[None]) -> None:  # on the worker thread
            # A closed loop (RuntimeError) has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._completed, log, state, seq, job, started)

        try:
            self._pool().submit(_fdatasync, segment).add_done_callback(done)
        except RuntimeError:
            # The interpreter is exiting and thread pools take no more work.
            job: Future[None] = Future()
            try:
                _fdatasync(segment)
                job.set_result(None)
            except OSError as exc:
                job.set_exception(exc)
            self._completed(log, state, seq, job, started)

    def _completed(
        self, log: PartitionLog, state: _LogSyncs, seq: int, job: Future[None], started: float
    ) -> None:
        state.in_flight -= 1
        self.in_flight -= 1
        exc = job.exception()
        if exc is not None:
            if isinstance(exc, OSError):
                log.sync_failed(exc)
            else:
                log.sync_failed(OSError(errno.EIO, str(exc)))
        else:
            if self.on_fsync is not None:
                self.on_fsync(time.perf_counter() - started)
            log.mark_durable(seq)
        waiters = state.waiters
        if log.offline is not None:
            error = _offline(log)
            for _, fut in waiters:
                if not fut.done():
                    fut.set_exception(error)
            waiters.clear()
        elif log.closed:
            # Closing flushed the log: nothing appended to it is left to make durable.
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            waiters.clear()
        else:
            durable = log.durable_seq
            done = 0
            for target, fut in waiters:
                if target > durable:
                    break
                if not fut.done():
                    fut.set_result(None)
                done += 1
            if done:
                del waiters[:done]
            if waiters and state.started_seq < waiters[-1][0] and self._may_start(state):
                self._start(log, state)
        if not waiters and not state.in_flight:
            self._logs.pop(id(log), None)


def _offline(log: PartitionLog) -> KafkaStorageError:
    return KafkaStorageError(
        f"partition {log.name}: fsync failed ({log.offline}), not acknowledged"
    )


def _fdatasync(segment: LogSegment) -> None:
    try:
        segment.flush()
    except OSError as exc:
        # The segment was deleted under us (retention or topic deletion): nothing to keep.
        if exc.errno != errno.EBADF:
            raise
