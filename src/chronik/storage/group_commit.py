"""Group commit for acks=all: one fsync in flight per log, shared by every waiter.

A caller waits until an fsync that began after its append has completed. Appends are
numbered (PartitionLog.append_seq); an fsync started when the counter read N makes
everything up to N durable. While one fsync runs, new callers queue behind it; the next
fsync then covers all of them at once. The fsync runs in a worker thread so the event
loop keeps serving. A roll fsyncs the sealed segment itself and marks the log durable up
to the roll, so an fsync in flight only ever needs the segment it was started on. The
fsync pins that segment's file (chronik.storage.file_cache), reopening it if it was
evicted: an fsync on any descriptor of a file flushes the file, and the pin keeps the
event loop from closing the descriptor under the worker thread.

A failed fsync takes the log offline (PartitionLog.sync_failed): every caller still
waiting, and every later one, gets KafkaStorageError instead of an acknowledgement.
"""
from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable
from concurrent.futures import Executor

from chronik.storage.errors import KafkaStorageError
from chronik.storage.partition_log import PartitionLog
from chronik.storage.segment import LogSegment


class GroupCommitter:
    def __init__(self, executor: Executor | None = None) -> None:
        self._executor = executor
        self._in_flight: dict[int, asyncio.Future[None]] = {}
        self.fsyncs = 0  # fsyncs issued, for tests and metrics
        self.on_fsync: Callable[[float], None] | None = None  # seconds each fsync took

    async def sync(self, log: PartitionLog) -> None:
        """Return once everything appended to ``log`` so far is on disk; raises
        KafkaStorageError if an fsync failed first."""
        target = log.append_seq
        key = id(log)
        while log.durable_seq < target:
            if log.offline is not None:
                raise KafkaStorageError(
                    f"partition {log.name}: fsync failed ({log.offline}), not acknowledged"
                )
            if log.closed:
                return
            task = self._in_flight.get(key)
            if task is None:
                task = asyncio.ensure_future(self._fsync(log, key))
                self._in_flight[key] = task
            await asyncio.shield(task)

    async def _fsync(self, log: PartitionLog, key: int) -> None:
        try:
            seq, segment = log.sync_target()
            loop = asyncio.get_running_loop()
            self.fsyncs += 1
            started = time.perf_counter()
            try:
                try:
                    await loop.run_in_executor(self._executor, _fdatasync, segment)
                except RuntimeError:
                    # The interpreter is exiting and thread pools take no more work.
                    _fdatasync(segment)
            except OSError as exc:
                log.sync_failed(exc)
                return
            if self.on_fsync is not None:
                self.on_fsync(time.perf_counter() - started)
            log.mark_durable(seq)
        finally:
            self._in_flight.pop(key, None)


def _fdatasync(segment: LogSegment) -> None:
    try:
        segment.flush()
    except OSError as exc:
        # The segment was deleted under us (retention or topic deletion): nothing to keep.
        if exc.errno != errno.EBADF:
            raise
