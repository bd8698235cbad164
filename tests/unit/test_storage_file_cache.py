"""The descriptor cache: bounded, LRU, and never closing a file under its user."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from test_storage_support import NOW, all_records, append, client_batch, small_config

from chronik.records.batch import validate_produced
from chronik.storage.file_cache import FILES, FileCache
from chronik.storage.partition_log import PartitionLog
from chronik.storage.segment import LogSegment


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def cache_of() -> Iterator:
    """Shrink the process-wide cache for one test: ``cache_of(4)``."""
    before = FILES.capacity

    def shrink(capacity: int) -> FileCache:
        FILES.configure(capacity)
        return FILES

    yield shrink
    FILES.configure(before)


def make_files(cache: FileCache, tmp_path, n: int) -> list:
    files = []
    for i in range(n):
        path = tmp_path / f"f{i}"
        path.write_bytes(bytes([i]) * 10)
        files.append(cache.file(path, os.O_RDONLY))
    return files


def test_eviction_closes_the_least_recently_used(tmp_path):
    cache = FileCache(2)
    a, b, c = make_files(cache, tmp_path, 3)
    before = open_fds()
    a.open_now()
    b.open_now()
    with a:  # a is now the most recent
        pass
    c.open_now()
    assert (a.is_open, b.is_open, c.is_open) == (True, False, True)
    assert cache.open_count == 2 and cache.evictions == 1
    assert open_fds() == before + 2


def test_an_evicted_file_is_reopened_on_use_with_the_same_bytes(tmp_path):
    cache = FileCache(1)
    a, b = make_files(cache, tmp_path, 2)
    with a as fd:
        first = os.pread(fd, 10, 0)
    b.open_now()
    assert not a.is_open
    with a as fd:
        assert os.pread(fd, 10, 0) == first == b"\0" * 10
    assert cache.opens == 3


def test_a_pinned_file_is_not_closed_under_its_user(tmp_path):
    cache = FileCache(1)
    a, b, c = make_files(cache, tmp_path, 3)
    with a as fd:
        b.open_now()
        c.open_now()
        a.close()  # deferred: still pinned
        assert os.pread(fd, 10, 0) == b"\0" * 10
        assert os.fstat(fd).st_ino == os.stat(a.path).st_ino
    assert not a.is_open


def test_a_retired_file_stays_open_for_its_pin_holder_then_refuses(tmp_path):
    cache = FileCache(4)
    (a,) = make_files(cache, tmp_path, 1)
    with a as fd:
        a.retire()
        a.path.unlink()
        with a as again:  # a nested pin shares the descriptor still open
            assert again == fd
        assert os.pread(fd, 10, 0) == b"\0" * 10
    assert not a.is_open
    with pytest.raises(OSError), a:
        pass


def test_create_flags_apply_to_the_first_open_only(tmp_path):
    cache = FileCache(1)
    path = tmp_path / "grows"
    f = cache.file(path, os.O_RDWR | os.O_APPEND, create_flags=os.O_CREAT | os.O_TRUNC)
    with f as fd:
        os.write(fd, b"abc")
    (other,) = make_files(cache, tmp_path, 1)
    other.open_now()
    assert not f.is_open
    with f as fd:  # reopened for append, not truncated
        os.write(fd, b"def")
    assert path.read_bytes() == b"abcdef"


def test_reads_and_appends_after_eviction_land_where_they_belong(tmp_path, cache_of):
    cache = cache_of(3)
    config = small_config(segment_bytes=400)
    logs = [PartitionLog.open(tmp_path / f"p-{i}", config) for i in range(4)]
    expected: dict[int, list[bytes]] = {i: [] for i in range(4)}
    for round_ in range(30):  # each append evicts other partitions' files
        for i, log in enumerate(logs):
            value = f"{i}-{round_}".encode() * 8
            append(log, client_batch(1, value=value))
            expected[i].append(value)
    assert cache.open_count <= 3
    assert all(len(log.segments) > 3 for log in logs)
    for i, log in enumerate(logs):
        assert [r.value for r in all_records(log)] == expected[i]
        log.close()
    for i in range(4):
        again = PartitionLog.open(tmp_path / f"p-{i}", config)
        assert [r.value for r in all_records(again)] == expected[i]
        again.close()


def test_reading_many_closed_segments_keeps_descriptors_bounded(tmp_path, cache_of):
    cache_of(8)
    log = PartitionLog.open(tmp_path / "p-0", small_config(segment_bytes=100))
    for i in range(150):
        append(log, client_batch(1, value=b"%05d" % i))
    assert len(log.segments) >= 149
    before = open_fds()
    assert [r.value for r in all_records(log)] == [b"%05d" % i for i in range(150)]
    assert open_fds() <= before + 8
    assert log.compact(NOW) > 0  # one key: every closed segment is read and rewritten
    assert open_fds() <= before + 8
    assert all_records(log)[-1].value == b"00149"
    log.close()


def test_group_commit_flush_against_concurrent_close_and_eviction(tmp_path, cache_of):
    cache = cache_of(2)
    seg = LogSegment.create(tmp_path, 0, 4096, NOW)
    batch = client_batch(1)
    seg.append(batch, validate_produced(batch, 1 << 24))
    others = make_files(cache, tmp_path, 4)
    inode = os.stat(seg.log_path).st_ino
    failures: list[str] = []
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            try:
                seg.flush()
                with seg.file as fd:
                    if os.fstat(fd).st_ino != inode:
                        failures.append("a pinned descriptor named another file")
                    os.fdatasync(fd)
            except OSError as exc:
                failures.append(repr(exc))

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(3000):
            seg.file.close()
            others[i % 4].open_now()
    finally:
        stop.set()
        thread.join()
    assert failures == []
    seg.close()
    assert not seg.file.is_open
