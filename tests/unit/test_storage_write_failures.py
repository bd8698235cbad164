"""Storage under failing writes: a full disk or an I/O error in the middle of an append,
an index entry, a roll or an fsync is an error, never a torn log."""
from __future__ import annotations

import asyncio
import errno
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, all_records, append, client_batch, open_log, small_config

from chronik.storage.catalog import Catalog
from chronik.storage.errors import KAFKA_STORAGE_ERROR, KafkaStorageError
from chronik.storage.group_commit import GroupCommitter
from chronik.storage.partition_log import CLEAN_SHUTDOWN

HC = [HealthCheck.function_scoped_fixture]


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class Disk:
    """Fault injection on the real os calls. While ``full`` names file suffixes, a write to
    such a file first writes a short prefix (a torn write), and the next one fails with
    ENOSPC, as a filling disk does. ``cut_fails`` makes ftruncate fail too, ``create_fails``
    makes creating a file with one of those suffixes fail, ``sync_fails`` fails fdatasync."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full: tuple[str, ...] = ()
        self.cut_fails = False
        self.create_fails: tuple[str, ...] = ()
        self.sync_fails = False
        self.fsync_fails: tuple[str, ...] = ()
        self._torn: set[int] = set()
        real_write, real_truncate, real_open = os.write, os.ftruncate, os.open
        real_fdatasync, real_fsync = os.fdatasync, os.fsync

        def write(fd, data):
            if self.full and _path_of(fd).endswith(self.full):
                if fd in self._torn or len(data) < 2:
                    self._torn.discard(fd)
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                self._torn.add(fd)
                return real_write(fd, bytes(memoryview(data)[: len(data) // 2]))
            return real_write(fd, data)

        def ftruncate(fd, size):
            if self.cut_fails:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_truncate(fd, size)

        def open_(path, flags, mode=0o777, **kw):
            if self.create_fails and flags & os.O_CREAT and str(path).endswith(self.create_fails):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_open(path, flags, mode, **kw)

        def fdatasync(fd):
            if self.sync_fails:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_fdatasync(fd)

        def fsync(fd):
            # Buffered writes (open().write) reach the disk at flush; fsync then fails.
            if self.fsync_fails and _path_of(fd).endswith(self.fsync_fails):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "ftruncate", ftruncate)
        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "fdatasync", fdatasync)


@pytest.fixture
def disk(monkeypatch):
    return Disk(monkeypatch)


def values(log) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in all_records(log)]


def batch(i: int, n: int = 1) -> bytearray:
    return client_batch(n, ts=NOW + i, value=b"rec-%05d-" % i + b"x" * 30)


def expected(acked: list[tuple[int, int, int]]) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the acknowledged (i, base, n) batches."""
    return [
        (base + j, b"rec-%05d-" % i + b"x" * 30) for i, base, n in acked for j in range(n)
    ]


def file_sizes_match(log) -> None:
    """The files hold exactly what the in-memory state says, nothing torn after it."""
    for seg in log.segments:
        assert seg.log_path.stat().st_size == seg.size
        for idx in (seg.index, seg.time_index):
            if idx.path.exists():
                assert idx.path.stat().st_size == idx.size_bytes


def test_torn_log_write_is_cut_back_and_the_next_batch_lands_in_place(tmp_path, disk):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    acked = [(i, append(log, batch(i, 2)).base_offset, 2) for i in range(5)]
    before = (log.end_offset, log.append_seq, log.active.size)
    disk.full = (".log",)
    for i in range(5, 8):
        with pytest.raises(KafkaStorageError) as err:
            append(log, batch(i, 2))
        assert err.value.code == KAFKA_STORAGE_ERROR
    assert (log.end_offset, log.append_seq, log.active.size) == before
    file_sizes_match(log)
    disk.full = ()
    acked += [(i, append(log, batch(i, 3)).base_offset, 3) for i in range(8, 12)]
    assert acked[5][1] == before[0]  # no offset was spent on the failed writes
    assert values(log) == expected(acked)
    file_sizes_match(log)
    # Recovery after a crash (no close) and after a clean close agree.
    assert values(open_log(tmp_path / "t-0")) == expected(acked)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert values(again) == expected(acked)
    assert again.recovered_bytes_truncated == 0


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_torn_index_entry_undoes_the_whole_append(tmp_path, disk, suffix):
    # An index entry after every batch, so every append writes both indexes.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6, index_interval_bytes=1))
    acked = [(i, append(log, batch(i)).base_offset, 1) for i in range(4)]
    entries = (log.active.index.entries, log.active.time_index.entries)
    disk.full = (suffix,)
    with pytest.raises(KafkaStorageError):
        append(log, batch(4))
    assert (log.active.index.entries, log.active.time_index.entries) == entries
    assert log.end_offset == 4
    file_sizes_match(log)
    disk.full = ()
    acked += [(i, append(log, batch(i)).base_offset, 1) for i in range(5, 9)]
    for offset, value in expected(acked):  # every offset found through the index
        assert dict(values(log))[offset] == value
        assert log.read(offset, 1)
    file_sizes_match(log)
    log.close()
    assert values(open_log(tmp_path / "t-0")) == expected(acked)


def test_a_cut_that_fails_blocks_appends_until_it_succeeds(tmp_path, disk):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    acked = [(i, append(log, batch(i)).base_offset, 1) for i in range(3)]
    disk.full, disk.cut_fails = (".log",), True
    with pytest.raises(KafkaStorageError):
        append(log, batch(3))
    assert log.active.undo_pending
    assert log.active.log_path.stat().st_size > log.active.size  # torn bytes still there
    disk.full = ()  # space is back but the cut still fails: nothing may land after them
    with pytest.raises(KafkaStorageError):
        append(log, batch(4))
    assert log.end_offset == 3
    assert values(log) == expected(acked)
    disk.cut_fails = False
    acked.append((5, append(log, batch(5)).base_offset, 1))
    assert acked[-1][1] == 3
    file_sizes_match(log)
    assert values(open_log(tmp_path / "t-0")) == expected(acked)


def test_a_roll_that_fails_is_retried_by_the_next_append(tmp_path, disk):
    # No index entries while appending: the seal writes the only time index entry.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=600, index_interval_bytes=10**6))
    acked = []
    i = 0
    while len(log.segments) == 1:
        acked.append((i, append(log, batch(i)).base_offset, 1))
        i += 1
    # Fill the second segment up to the point where the next append rolls.
    while log.active.size + len(batch(i)) <= 600:
        acked.append((i, append(log, batch(i)).base_offset, 1))
        i += 1
    # 1. The sealing time index entry cannot be written.
    disk.full = (".timeindex",)
    with pytest.raises(KafkaStorageError):
        append(log, batch(i))
    assert log.active.active and len(log.segments) == 2
    file_sizes_match(log)
    # 2. Sealed, but the next segment's files cannot be created.
    disk.full, disk.create_fails = (), (".log",)
    with pytest.raises(KafkaStorageError):
        append(log, batch(i))
    assert len(log.segments) == 2 and not log.active.active
    # Nothing half-made of the next segment (the sealed one's indexes now exist).
    assert not list(log.directory.glob(f"{log.end_offset:020d}.*"))
    # 3. The segment starts but the producer state snapshot cannot be written.
    disk.create_fails = (".snapshot.tmp",)
    acked.append((i, append(log, batch(i)).base_offset, 1))
    assert len(log.segments) == 3
    assert not list(log.directory.glob("*.tmp"))
    disk.create_fails = ()
    acked += [(j, append(log, batch(j)).base_offset, 1) for j in range(i + 1, i + 4)]
    assert [base for _, base, _ in acked] == list(range(len(acked)))
    assert values(log) == expected(acked)
    assert values(open_log(tmp_path / "t-0")) == expected(acked)


def test_failed_fsync_takes_the_partition_offline_until_restart(tmp_path, disk):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    acked = [(i, append(log, batch(i)).base_offset, 1) for i in range(3)]
    committer = GroupCommitter()
    asyncio.run(committer.sync(log))
    append(log, batch(3))  # appended, waiting for its fsync
    disk.sync_fails = True
    with pytest.raises(KafkaStorageError) as err:
        asyncio.run(committer.sync(log))
    assert err.value.code == KAFKA_STORAGE_ERROR
    assert log.offline is not None
    disk.sync_fails = False  # a later fsync "succeeds", but what it covers is unknown
    with pytest.raises(KafkaStorageError):
        append(log, batch(4))
    with pytest.raises(KafkaStorageError):
        asyncio.run(committer.sync(log))
    assert values(log)[:3] == expected(acked)  # reads go on
    log.close()
    assert not (log.directory / CLEAN_SHUTDOWN).exists()  # recovered as after a crash
    again = open_log(tmp_path / "t-0")
    assert again.offline is None
    assert values(again)[:3] == expected(acked)
    assert append(again, batch(5)).base_offset == again.end_offset - 1


def test_close_on_a_full_disk_leaves_no_tmp_and_an_unclean_log(tmp_path, disk):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    acked = [(i, append(log, batch(i)).base_offset, 1) for i in range(3)]
    disk.full = (".tmp",)
    assert log.close() == "No space left on device"
    assert not list(log.directory.glob("*.tmp"))
    assert not (log.directory / CLEAN_SHUTDOWN).exists()
    disk.full = ()
    assert values(open_log(tmp_path / "t-0")) == expected(acked)


def test_each_change_of_state_is_logged_once(tmp_path, disk, caplog):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    append(log, batch(0))
    disk.full = (".log",)
    with caplog.at_level(logging.INFO, "chronik.storage"):
        for i in range(20):
            with pytest.raises(KafkaStorageError):
                append(log, batch(i))
        disk.full = ()
        for i in range(5):
            append(log, batch(i))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "partition t-0: write failed: No space left on device; "
        "appends refused until space is available",
        "partition t-0: writes resumed",
    ]


def test_topic_creation_on_a_full_disk_leaves_no_half_made_topic(tmp_path, disk):
    catalog = Catalog(tmp_path / "data")
    catalog.load()
    disk.fsync_fails = (".json.tmp",)
    with pytest.raises(KafkaStorageError):
        catalog.create_topic("t", 3)
    assert catalog.get("t") is None
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [".meta"]
    assert not list((tmp_path / "data" / ".meta").iterdir())
    disk.fsync_fails = ()
    assert len(catalog.create_topic("t", 3).partitions) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=HC)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(1, 4),
            st.sampled_from([None, None, ".log", ".index", ".timeindex", ".snapshot.tmp"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_acknowledged_records_survive_any_failing_writes(tmp_path_factory, monkeypatch, ops):
    disk = Disk(monkeypatch)
    directory = tmp_path_factory.mktemp("log") / "t-0"
    log = open_log(directory, small_config(segment_bytes=700, index_interval_bytes=100))
    acked = []
    for i, (n, failing, cut_fails) in enumerate(ops):
        disk.full, disk.cut_fails = ((failing,) if failing else ()), cut_fails and bool(failing)
        try:
            result = append(log, batch(i, n))
        except KafkaStorageError:
            continue
        finally:
            disk.full, disk.cut_fails = (), False
        acked.append((i, result.base_offset, n))
    assert values(log) == expected(acked)
    recovered = values(open_log(directory))  # as after kill -9
    if log.active.undo_pending:
        # The last failed write could not be cut back: recovery may keep it (whole, at
        # the next offset, never acknowledged), as a crash after a write may.
        recovered = recovered[: len(expected(acked))]
    assert recovered == expected(acked)
    log.close()
    assert values(open_log(directory))[: len(expected(acked))] == expected(acked)


def test_batches_behind_a_refused_one_get_the_storage_error_not_out_of_order(tmp_path, disk):
    """An idempotent producer's batches in flight behind one a full disk refused arrive
    with a gap in their sequence. Answered OUT_OF_ORDER_SEQUENCE_NUMBER, librdkafka starts
    a new producer epoch and sends again what may already be written (duplicates no
    broker can recognise); Kafka answers them with the storage error, and the client
    retries them in order with the same sequence numbers."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    append(log, client_batch(2, pid=7, epoch=0, seq=0))
    disk.full = (".log",)
    for seq in (2, 4, 6):  # the first is refused by the disk, the others by their gap
        with pytest.raises(KafkaStorageError) as err:
            append(log, client_batch(2, pid=7, epoch=0, seq=seq))
        assert err.value.code == KAFKA_STORAGE_ERROR
    disk.full = ()
    for seq in (2, 4, 6):  # the retries, in order
        append(log, client_batch(2, pid=7, epoch=0, seq=seq))
    assert log.end_offset == 8


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_a_followers_run_writes_each_index_once_and_a_torn_one_undoes_the_run(
    tmp_path, disk, suffix, monkeypatch
):
    config = small_config(segment_bytes=10**6, index_interval_bytes=1)
    leader = open_log(tmp_path / "leader-0", config)
    acked = [(i, append(leader, batch(i)).base_offset, 1) for i in range(8)]
    data = leader.read(0, 1 << 20)
    follower = open_log(tmp_path / "follower-0", config)
    follower.replicated = True
    disk.full = (suffix,)
    with pytest.raises(KafkaStorageError):
        follower.append_replicated(data, NOW)
    assert follower.end_offset == 0
    assert (follower.active.index.entries, follower.active.time_index.entries) == (0, 0)
    file_sizes_match(follower)
    disk.full = ()
    writes: list[str] = []
    real_write = os.write

    def counting(fd, chunk):
        writes.append(_path_of(fd).rsplit(".", 1)[-1])
        return real_write(fd, chunk)

    monkeypatch.setattr(os, "write", counting)
    assert follower.append_replicated(data, NOW) == 8
    # Eight batches, an index entry after each: one write per file for the whole run.
    # (The leader-epoch checkpoint is written once too, through a temporary file.)
    assert sorted(w for w in writes if w != "tmp") == ["index", "log", "timeindex"]
    assert follower.active.index.entries == leader.active.index.entries == 7
    file_sizes_match(follower)
    for offset, value in expected(acked):
        assert dict(values(follower))[offset] == value
    follower.close()
    assert values(open_log(tmp_path / "follower-0")) == expected(acked)
