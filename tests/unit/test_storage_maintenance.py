"""Background maintenance against crashes and races: a swap stopped between any two of its
renames, a pass whose input is deleted under it, a full disk, a stop, and orphans."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil

import pytest
from test_storage_compaction import compact_config, keyed
from test_storage_support import NOW, all_records, append, open_log

from chronik.storage import compaction
from chronik.storage.catalog import Catalog
from chronik.storage.segment import LogSegment

CONFIG = dict(segment_bytes=300, index_interval_bytes=60, delete_retention_ms=0)
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "300", "index.interval.bytes": "60"}


class Crash(BaseException):
    """A kill -9: nothing after it runs, no cleanup (not an Exception)."""


def _fill(log, n=20):
    # Distinct timestamps, superseded keys, and tombstones (dropped: delete.retention.ms=0).
    for i in range(n):
        key = b"k%d" % (i % 5)
        value = None if i % 11 == 6 else b"v%d" % i + b"." * 30
        append(log, keyed(key, value, ts=NOW - 10_000 + i * 7))


def _crash(log) -> None:
    """Drop the log object as a crash would: descriptors go, nothing is written."""
    for seg in log.segments:
        seg.close()


def _crash_at(monkeypatch, k: int) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []

    def hook(src, dst):
        if len(seen) == k:
            raise Crash
        seen.append((src.name, dst.name))

    monkeypatch.setattr(compaction, "before_rename", hook)
    return seen


def _fresh_indexes(seg: LogSegment, scratch) -> tuple[bytes, bytes]:
    scratch.mkdir(exist_ok=True)
    shutil.copy(seg.log_path, scratch / seg.log_path.name)
    copy = LogSegment(scratch, seg.base_offset, seg.index_interval_bytes)
    copy.size = seg.size
    copy.rebuild_indexes()
    copy.close()
    out = (copy.index.path.read_bytes(), copy.time_index.path.read_bytes())
    shutil.rmtree(scratch)
    return out


def _assert_consistent(log, original, scratch) -> None:
    records = all_records(log)
    before = {r.offset: r for r in original}
    # Nothing invented, nothing that survives compaction lost, nothing deleted back.
    assert all(before[r.offset] == r for r in records)
    closed_end = log.active.base_offset
    last = {}
    for r in original:
        last[r.key] = r
    kept = {r.offset for r in records}
    for key, r in last.items():
        if r.value is not None or r.offset >= closed_end:
            assert r.offset in kept
        else:  # a dropped tombstone: either still there, or no record of its key is
            assert r.offset in kept or not any(x.key == key for x in records)
    # Every index describes the .log beside it.
    for seg in log.segments[:-1]:
        index, time_index = _fresh_indexes(seg, scratch)
        assert seg.index.path.read_bytes() == index, seg.base_offset
        assert seg.time_index.path.read_bytes() == time_index, seg.base_offset
    # ListOffsets by timestamp and MAX_TIMESTAMP agree with a scan of the records.
    for ts in sorted({r.timestamp for r in original}):
        first = next((r for r in records if r.timestamp >= ts), None)
        got = log.offset_for_timestamp(ts)
        assert got == ((first.offset, first.timestamp) if first else None), ts
    top = max(r.timestamp for r in records)
    assert log.max_timestamp() == (top, next(r.offset for r in records if r.timestamp == top))
    assert not [p for p in log.directory.iterdir() if p.suffix in (".swap", ".cleaned")]


def _total_renames(tmp_path, monkeypatch) -> int:
    log = open_log(tmp_path / "count-0", compact_config(**CONFIG))
    _fill(log)
    seen = _crash_at(monkeypatch, 10**9)
    assert log.compact(NOW) > 0
    log.close()
    return len(seen)


def test_a_crash_between_any_two_renames_of_a_swap_recovers_consistently(
    tmp_path, monkeypatch
):
    total = _total_renames(tmp_path, monkeypatch)
    assert total >= 12  # several segments swapped, three files each, commit and install
    for k in range(total):
        path = tmp_path / f"t{k}-0"
        log = open_log(path, compact_config(**CONFIG))
        _fill(log)
        original = all_records(log)
        _crash_at(monkeypatch, k)
        with pytest.raises(Crash):
            log.compact(NOW)
        _crash(log)
        # Recovery itself may be cut short between its renames, any number of times.
        j = 0
        while True:
            _crash_at(monkeypatch, j)
            try:
                again = open_log(path, compact_config(**CONFIG))
                break
            except Crash:
                j += 1
        monkeypatch.setattr(compaction, "before_rename", compaction._no_crash)
        _assert_consistent(again, original, tmp_path / "scratch")
        _crash(again)
        again = open_log(path, compact_config(**CONFIG))  # and a second restart agrees
        _assert_consistent(again, original, tmp_path / "scratch")
        again.close()


def _temporaries(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix in (".swap", ".cleaned"))


def _patch_before_segment(monkeypatch, n: int, action, crash: bool = False):
    """Run ``action`` when the pass starts rewriting its ``n``-th segment."""
    real = compaction.clean_segment
    calls = []

    def wrapped(seg, *args, **kwargs):
        calls.append(seg.base_offset)
        if len(calls) == n:
            action()
        if crash:
            kwargs.pop("check", None)
        result = real(seg, *args, **kwargs)
        if crash and len(calls) == n:
            raise Crash
        return result

    monkeypatch.setattr(compaction, "clean_segment", wrapped)


def test_delete_records_during_a_pass_abandons_it_cleanly(tmp_path, monkeypatch, caplog):
    log = open_log(tmp_path / "t-0", compact_config(**CONFIG))
    _fill(log, 80)
    job = log.compaction_job(NOW)
    assert job is not None and len(job.segments) > 4
    cut = job.segments[3].base_offset
    _patch_before_segment(monkeypatch, 2, lambda: log.delete_records(cut))
    caplog.set_level(logging.INFO, "chronik.storage")
    job.run()  # on the worker thread in the broker; the deletion came from the loop
    assert job.install() == 0
    assert _temporaries(log.directory) == []
    abandoned = [r for r in caplog.records if "abandoned" in r.getMessage()]
    assert len(abandoned) == 1 and abandoned[0].levelno == logging.INFO
    assert "DeleteRecords" in abandoned[0].getMessage()
    assert all(r.offset >= cut for r in all_records(log))
    monkeypatch.undo()
    assert log.maybe_compact(NOW) > 0  # the next pass, on what is left, goes through
    log.close()


def _produce(catalog: Catalog, name: str, tag: bytes, n: int) -> None:
    log = catalog.partition(name, 0)
    for i in range(n):
        append(log, keyed(b"k%d" % (i % 5), tag + b"%d" % i + b"." * 30))


@pytest.mark.parametrize("crash", [False, True], ids=["pass-ends", "kill-9"])
def test_topic_deleted_and_recreated_during_a_pass(tmp_path, monkeypatch, crash):
    data = tmp_path / "data"
    catalog = Catalog(data)
    catalog.load()
    catalog.create_topic("t", 1, TOPIC_CONFIGS)
    _produce(catalog, "t", b"old", 80)
    job = catalog.partition("t", 0).compaction_job(NOW)
    assert job is not None

    def recreate():
        catalog.delete_topic("t")
        catalog.create_topic("t", 1, TOPIC_CONFIGS)
        _produce(catalog, "t", b"new", 30)

    _patch_before_segment(monkeypatch, 1, recreate, crash=crash)
    if crash:
        # The pass dies after writing its copy, unless it found its segment's file
        # already closed for good by the deletion and gave up first.
        with contextlib.suppress(Crash):
            job.run()
        for topic in catalog.topics.values():
            for log in topic.partitions:
                _crash(log)
        catalog = Catalog(data)
        catalog.load()  # the restart
    else:
        job.run()
        assert job.install() == 0
        assert job.abandoned == "the partition was deleted"
    new = catalog.partition("t", 0)
    values = [r.value for r in all_records(new)]
    assert len(values) == 30 and all(v.startswith(b"new") for v in values)
    assert _temporaries(new.directory) == []
    assert sorted(p.name for p in data.iterdir()) == [".meta", "t-0"]
    catalog.close()


def test_a_full_disk_leaves_the_log_as_it_was_and_is_logged_once(tmp_path, monkeypatch, caplog):
    log = open_log(tmp_path / "t-0", compact_config(**CONFIG))
    _fill(log, 80)
    before = all_records(log)
    real_write = os.write
    full = [True]

    def write(fd, data):
        if full[0] and os.readlink(f"/proc/self/fd/{fd}").endswith(".log.cleaned"):
            _raise(errno.ENOSPC)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    caplog.set_level(logging.INFO, "chronik.storage")
    for _ in range(3):  # three retention checks in a row
        assert log.maybe_compact(NOW) == 0
        assert _temporaries(log.directory) == []
        assert all_records(log) == before
    failed = [r for r in caplog.records if "compaction failed" in r.getMessage()]
    assert len(failed) == 1 and "No space left on device" in failed[0].getMessage()
    full[0] = False
    assert log.maybe_compact(NOW) > 0
    assert any("compaction resumed" in r.getMessage() for r in caplog.records)
    log.close()


def _raise(code: int):
    raise OSError(code, os.strerror(code))


def test_an_io_error_syncing_a_cleaned_file_leaves_nothing_behind(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", compact_config(**CONFIG))
    _fill(log, 80)
    before = all_records(log)
    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".cleaned"):
            _raise(errno.EIO)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    job = log.compaction_job(NOW)
    job.run()
    assert isinstance(job.failure, OSError) and job.install() == 0
    assert _temporaries(log.directory) == [] and all_records(log) == before
    log.close()


def test_a_stopped_pass_leaves_no_files(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", compact_config(**CONFIG))
    _fill(log, 80)
    before = all_records(log)
    job = log.compaction_job(NOW)
    _patch_before_segment(monkeypatch, 3, job.stop)
    job.run()
    assert job.abandoned == "the broker is stopping"
    assert _temporaries(log.directory) == []
    assert job.install() == 0 and all_records(log) == before
    log.close()


def test_load_removes_orphaned_temporaries_and_deleted_directories(tmp_path):
    data = tmp_path / "data"
    catalog = Catalog(data)
    catalog.load()
    catalog.create_topic("t", 1, TOPIC_CONFIGS)
    _produce(catalog, "t", b"v", 40)
    catalog.close()
    orphan = data / "gone-0"  # a deleted topic's partition holding only a pass's files
    orphan.mkdir()
    for name in ("00000000000000000007.log.swap", "00000000000000000007.index.cleaned"):
        (orphan / name).write_bytes(b"x")
    deleted = data / ("t-0." + "ab" * 16 + "-delete")
    deleted.mkdir()
    (deleted / "00000000000000000000.log").write_bytes(b"x")
    foreign = data / "photos-2024"  # not chronik's: left alone
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"x")
    live = data / "t-0"
    (live / "00000000000000000000.log.cleaned").write_bytes(b"x")
    (live / "00000000000000000000.timeindex.swap").write_bytes(b"x")
    (live / "log-start-offset.tmp").write_bytes(b"x")
    catalog = Catalog(data)
    catalog.load()
    assert sorted(p.name for p in data.iterdir()) == [".meta", "photos-2024", "t-0"]
    assert not [p for p in live.iterdir() if p.suffix in (".swap", ".cleaned", ".tmp")]
    assert len(all_records(catalog.partition("t", 0))) == 40
    catalog.close()
