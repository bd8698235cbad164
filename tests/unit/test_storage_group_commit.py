"""Group commit: concurrent acks=all waiters share fsyncs."""
from __future__ import annotations

import asyncio
import threading

from test_storage_support import append, client_batch, open_log, small_config

from chronik.storage.errors import KafkaStorageError
from chronik.storage.group_commit import (
    MAX_IN_FLIGHT,
    OVERLAP_COVERS,
    OVERLAP_TOTAL,
    GroupCommitter,
)


class CountingSegmentFlush:
    """Counts fsyncs and holds each one until released, so waiters pile up."""

    def __init__(self, log):
        self.calls = 0
        self.gate = threading.Event()
        self._log = log

    def patch(self):
        for seg in self._log.segments:
            self._wrap(seg)

    def _wrap(self, seg):
        original = seg.flush

        def flush():
            self.calls += 1
            self.gate.wait(5)
            original()

        seg.flush = flush


def test_concurrent_syncs_share_fsyncs(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**7))
    counter = CountingSegmentFlush(log)
    counter.patch()
    committer = GroupCommitter()

    async def scenario():
        append(log, client_batch(1))
        first = asyncio.create_task(committer.sync(log))
        await asyncio.sleep(0.05)  # its fsync is now in flight, held by the gate
        waiters = []
        for _ in range(50):
            append(log, client_batch(1))
            waiters.append(asyncio.create_task(committer.sync(log)))
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiters)  # they need an fsync begun after them
        counter.gate.set()
        await asyncio.gather(first, *waiters)

    asyncio.run(scenario())
    assert not log.dirty
    assert counter.calls == 2  # one for the first append, one shared by all 50 others
    assert committer.fsyncs == 2


def test_fsyncs_in_flight_are_bounded(tmp_path):
    """Each append made while the fsyncs in flight do not cover it starts one, up to
    MAX_IN_FLIGHT per log and OVERLAP_TOTAL on the broker; the appends after those share
    the next."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**7))
    counter = CountingSegmentFlush(log)
    counter.patch()
    committer = GroupCommitter()

    async def scenario():
        waiters = []
        for _ in range(20):
            append(log, client_batch(1))
            waiters.append(asyncio.create_task(committer.sync(log)))
            await asyncio.sleep(0.01)  # the task has asked for its fsync
        assert not any(w.done() for w in waiters)
        assert counter.calls == min(MAX_IN_FLIGHT, OVERLAP_TOTAL)
        counter.gate.set()
        await asyncio.gather(*waiters)

    asyncio.run(scenario())
    assert not log.dirty
    assert counter.calls == min(MAX_IN_FLIGHT, OVERLAP_TOTAL) + 1


def test_no_overlapping_fsync_while_other_logs_keep_the_disk_busy(tmp_path):
    """With OVERLAP_TOTAL fsyncs in flight across the broker (many partitions taking
    appends), an append not covered by its log's fsync in flight waits for it and
    shares the next one instead of starting an fsync per batch."""
    logs = [
        open_log(tmp_path / f"t-{i}", small_config(segment_bytes=10**7))
        for i in range(OVERLAP_TOTAL)
    ]
    counters = [CountingSegmentFlush(log) for log in logs]
    for counter in counters:
        counter.patch()
    committer = GroupCommitter()

    async def scenario():
        first = []
        for log in logs:
            append(log, client_batch(1))
            first.append(asyncio.create_task(committer.sync(log)))
        await asyncio.sleep(0.05)
        assert [c.calls for c in counters] == [1] * OVERLAP_TOTAL
        later = []
        for _ in range(3):
            append(logs[0], client_batch(1))
            later.append(asyncio.create_task(committer.sync(logs[0])))
            await asyncio.sleep(0.01)
        assert counters[0].calls == 1  # the broker's fsyncs are busy: no overlap
        for counter in counters:
            counter.gate.set()
        await asyncio.gather(*first, *later)

    asyncio.run(scenario())
    assert counters[0].calls == 2  # the three later appends shared one fsync
    assert not any(log.dirty for log in logs)


def test_appends_faster_than_fsyncs_share_them(tmp_path):
    """Once an fsync covers more than OVERLAP_COVERS callers, the next callers queue for
    the fsync started when it completes rather than each starting one."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**7))
    counter = CountingSegmentFlush(log)
    counter.patch()
    committer = GroupCommitter()

    async def scenario():
        append(log, client_batch(1))
        busy = [asyncio.create_task(committer.sync(log)) for _ in range(OVERLAP_COVERS + 1)]
        await asyncio.sleep(0.05)
        later = []
        for _ in range(5):
            append(log, client_batch(1))
            later.append(asyncio.create_task(committer.sync(log)))
            await asyncio.sleep(0.01)
        assert counter.calls == 1  # no fsync beside the busy one
        counter.gate.set()
        await asyncio.gather(*busy, *later)

    asyncio.run(scenario())
    assert not log.dirty
    assert counter.calls == 2  # the five later callers shared the second


def test_an_append_does_not_wait_for_an_fsync_started_before_it(tmp_path):
    """An fsync in flight covers only what was appended before it began: a later append
    starts its own at once rather than waiting for that one to end first."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**7))
    gates = [threading.Event(), threading.Event()]
    calls = []
    original = log.active.flush

    def flush():
        gate = gates[min(len(calls), 1)]
        calls.append(gate)
        gate.wait(5)
        original()

    log.active.flush = flush
    committer = GroupCommitter()

    async def scenario():
        append(log, client_batch(1))
        first = asyncio.create_task(committer.sync(log))
        await asyncio.sleep(0.05)
        append(log, client_batch(1))
        second = asyncio.create_task(committer.sync(log))
        gates[1].set()  # the second fsync completes, the first is still held
        await asyncio.wait_for(second, 5)
        # The second fsync began after the first append too: both are durable.
        assert first.done() or log.durable_seq >= 2
        gates[0].set()
        await first

    asyncio.run(scenario())
    assert len(calls) == 2
    assert not log.dirty


def test_a_failed_fsync_fails_every_waiter(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**7))

    def flush():
        raise OSError(5, "Input/output error")

    log.active.flush = flush
    committer = GroupCommitter()

    async def scenario():
        append(log, client_batch(1))
        waiters = [asyncio.create_task(committer.sync(log)) for _ in range(3)]
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, KafkaStorageError) for r in results)
        append_failed = False
        try:
            append(log, client_batch(1))
        except KafkaStorageError:
            append_failed = True
        assert append_failed  # offline: no more writes

    asyncio.run(scenario())
    assert log.offline is not None


def test_sync_returns_at_once_when_nothing_is_pending(tmp_path):
    log = open_log(tmp_path / "t-0")
    committer = GroupCommitter()
    asyncio.run(committer.sync(log))
    assert committer.fsyncs == 0
    append(log, client_batch(1))
    asyncio.run(committer.sync(log))
    asyncio.run(committer.sync(log))
    assert committer.fsyncs == 1


def test_a_roll_makes_earlier_appends_durable(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=500))
    committer = GroupCommitter()
    for _ in range(3):
        append(log, client_batch(3))
    assert len(log.segments) > 1  # rolled: the sealed segment was fsynced then
    seq_before = log.durable_seq
    assert seq_before > 0
    asyncio.run(committer.sync(log))
    assert not log.dirty
