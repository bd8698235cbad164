"""Markers on the partitions this broker leads, written in one pass: every marker
appended and its fsync started before anything waits (PartitionWriter.start_sync and
durable_all), each partition answered for itself: a partition whose fsync fails gets
KAFKA_STORAGE_ERROR and the others are still durable and answered NONE."""

from __future__ import annotations

import asyncio
import threading

from test_storage_support import NOW, append, open_log, small_config

from chronik.coordinator.marker_writer import MarkerWriter
from chronik.protocol import errors
from chronik.records.builder import Record, build_batch
from chronik.storage.group_commit import GroupCommitter
from chronik.storage.partition_writer import PartitionWriter

PID, EPOCH = 7, 0


def _transactional(sequence: int, pid: int = PID) -> bytearray:
    return bytearray(build_batch(
        [Record(NOW, b"k", b"v")], producer_id=pid, producer_epoch=EPOCH,
        base_sequence=sequence, transactional=True,
    ))


def _logs(tmp_path, count: int):
    logs = {}
    for index in range(count):
        log = open_log(tmp_path / f"t-{index}", small_config(segment_bytes=10**7))
        append(log, _transactional(0))
        logs[("t", index)] = log
    return logs


def _writer(logs) -> MarkerWriter:
    partition_writer = PartitionWriter(GroupCommitter(), wake=lambda log: None)
    return MarkerWriter(
        partition_writer, lambda name, index: (logs[(name, index)], errors.NONE), lambda: NOW
    )


def test_every_fsync_starts_before_the_first_completes(tmp_path):
    logs = _logs(tmp_path, 4)
    started: list[str] = []
    gate = threading.Event()
    for (_, index), log in logs.items():
        original = log.active.flush

        def flush(original=original, index=index):
            started.append(f"t-{index}")
            gate.wait(5)
            original()

        log.active.flush = flush
    writer = _writer(logs)

    async def scenario():
        writing = asyncio.ensure_future(writer.write(PID, EPOCH, 0, True, sorted(logs)))
        for _ in range(200):
            if len(started) == len(logs):
                break
            await asyncio.sleep(0.01)
        # All four fsyncs are running at once: none waited for another.
        assert sorted(started) == [f"t-{i}" for i in range(4)]
        assert not writing.done()
        gate.set()
        return await asyncio.wait_for(writing, 5)

    results = asyncio.run(scenario())
    assert results == dict.fromkeys(sorted(logs), errors.NONE)
    for log in logs.values():
        assert not log.dirty
        assert log.producer_state.first_unstable_offset() is None


def test_a_failed_fsync_fails_its_partition_only(tmp_path):
    logs = _logs(tmp_path, 3)

    def broken():
        raise OSError(5, "Input/output error")

    logs[("t", 1)].active.flush = broken
    results = asyncio.run(_writer(logs).write(PID, EPOCH, 0, False, sorted(logs)))
    assert results == {
        ("t", 0): errors.NONE,
        ("t", 1): errors.KAFKA_STORAGE_ERROR,
        ("t", 2): errors.NONE,
    }
    assert logs[("t", 1)].offline is not None
    assert not logs[("t", 0)].dirty and not logs[("t", 2)].dirty


def test_markers_of_several_transactions_appended_first_share_the_fsyncs(tmp_path):
    """WriteTxnMarkers appends the markers of every transaction in the request before it
    waits on any: one fsync per partition covers them all."""
    logs = {}
    for index in range(2):
        log = open_log(tmp_path / f"t-{index}", small_config(segment_bytes=10**7))
        for pid in (PID, PID + 1):
            append(log, _transactional(0, pid))
        logs[("t", index)] = log
    writer = _writer(logs)

    async def scenario():
        appended = [writer.append(pid, EPOCH, 0, True, sorted(logs)) for pid in (PID, PID + 1)]
        return await asyncio.gather(*(writer.durable(done) for done in appended))

    first, second = asyncio.run(scenario())
    assert first == second == dict.fromkeys(sorted(logs), errors.NONE)
    assert writer.writer.committer.fsyncs == len(logs)
    for log in logs.values():
        assert not log.dirty
        assert log.producer_state.first_unstable_offset() is None

