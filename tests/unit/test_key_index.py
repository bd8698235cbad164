"""Per-key versions (key.versioning.enable): stamping, conditional appends, and the
per-key index against a scan of the log through appends, restarts, crashes, truncation,
retention, compaction and replication."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from test_storage_support import NOW, all_records, open_log, small_config

from chronik.records.batch import INVALID_RECORD, read_header
from chronik.records.builder import Record, build_batch
from chronik.records.versions import EXPECTED_HEADER, VERSION_HEADER, VersionError, header_version
from chronik.storage import key_index as key_index_module
from chronik.storage.key_index import FILE_NAME, KeyIndex
from chronik.storage.key_reads import read_events, read_records

HC = [HealthCheck.function_scoped_fixture]


def vconfig(**kw):
    return small_config(key_versioning=True, **kw)


def rec(key, value=b"v", expected=None, headers=()):
    hs = tuple(headers)
    if expected is not None:
        hs += ((EXPECTED_HEADER, str(expected).encode()),)
    return Record(NOW, key, value, hs)


def put(log, records, codec=0, pid=-1, epoch=-1, seq=-1, transactional=False):
    data = bytearray(
        build_batch(
            records,
            compression=codec,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=transactional,
        )
    )
    return log.append(data, read_header(data), NOW)


def scan(log):
    """(key, version, offset) of every keyed record in the log, from its headers."""
    return [
        (r.key, header_version(r), r.offset) for r in all_records(log) if r.key is not None
    ]


def assert_agrees(log, counts=None):
    """The index holds exactly the log's keyed records with the versions they carry, and
    each key's count is one past its newest version (or ``counts``, the model's)."""
    index = log.key_index
    assert index is not None
    assert index.end == log.end_offset
    rows = scan(log)
    assert all(v is not None for _, v, _ in rows)
    assert sorted(index.rows(), key=lambda r: r[2]) == rows
    newest: dict[bytes, int] = {}
    for key, version, _ in rows:
        newest[key] = max(newest.get(key, 0), version + 1)
    stored = index.counts()
    for key, n in (counts or newest).items():
        assert stored.get(key, 0) == n, key


# -- stamping and conditional appends ---------------------------------------------------------
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_versions_are_stamped_per_key_in_every_codec(tmp_path, codec):
    log = open_log(tmp_path / "t-0", vconfig())
    put(log, [rec(b"a"), rec(b"b"), rec(b"a"), rec(None)], codec)
    put(log, [rec(b"a", headers=[(VERSION_HEADER, b"77"), ("x", None)])], codec)
    got = [(r.key, r.headers) for r in all_records(log)]
    assert got == [
        (b"a", ((VERSION_HEADER, b"0"),)),
        (b"b", ((VERSION_HEADER, b"0"),)),
        (b"a", ((VERSION_HEADER, b"1"),)),
        (None, ()),
        (b"a", (("x", None), (VERSION_HEADER, b"2"))),  # the client's version replaced
    ]
    assert read_header(log.read(0, 1 << 20)).compression == codec
    index = log.key_index
    assert index.version_count(b"a") == 3 and index.version_count(b"zz") == 0
    assert index.events(b"a") == [(0, 0), (1, 2), (2, 4)]
    assert index.events(b"a", from_version=1, limit=1) == [(1, 2)]
    assert index.keys_count() == 2
    assert_agrees(log)


def test_expected_versions_hold_or_the_whole_batch_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    put(log, [rec(b"acct-7", expected=0), rec(b"acct-7", expected=1), rec(b"acct-7")])
    end = log.end_offset
    with pytest.raises(VersionError) as caught:
        put(log, [rec(b"other", expected=0), rec(b"acct-7", expected=2)])
    assert caught.value.code == INVALID_RECORD
    assert str(caught.value) == "version conflict on key 'acct-7': expected 2, actual 3"
    assert caught.value.record_errors == ((1, str(caught.value)),)
    assert log.end_offset == end and log.key_index.version_count(b"other") == 0
    # Several failures are all named; a bad value, a keyless expectation, binary keys.
    with pytest.raises(VersionError) as caught:
        put(
            log,
            [
                rec(b"acct-7", expected=9),
                rec(b"\xff\x00", expected=1),
                rec(b"x", headers=[(EXPECTED_HEADER, b"-1")]),
                rec(None, expected=0),
            ],
        )
    errors = dict(caught.value.record_errors)
    assert sorted(errors) == [0, 1, 2, 3]
    assert "key 0xff00: expected 1, actual 0" in errors[1]
    assert "not a non-negative integer" in errors[2]
    assert "without a key" in errors[3]
    assert log.end_offset == end
    # The next expected version goes through; a stale one does not.
    put(log, [rec(b"acct-7", expected=3)])
    with pytest.raises(VersionError):
        put(log, [rec(b"acct-7", expected=3)])
    assert log.key_index.version_count(b"acct-7") == 4
    assert_agrees(log)


def test_an_idempotent_retry_gets_its_offsets_not_a_conflict(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    first = put(log, [rec(b"k", expected=0)], pid=5, epoch=0, seq=0)
    again = put(log, [rec(b"k", expected=0)], pid=5, epoch=0, seq=0)
    assert again.duplicate and again.base_offset == first.base_offset
    with pytest.raises(VersionError):
        put(log, [rec(b"k", expected=0)], pid=5, epoch=0, seq=1)
    assert log.end_offset == 1
    assert_agrees(log)


def test_transactional_batches_are_refused(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    with pytest.raises(VersionError, match="transactional"):
        put(log, [rec(b"k")], pid=5, epoch=0, seq=0, transactional=True)
    assert log.end_offset == 0


def test_topics_that_do_not_opt_in_are_untouched(tmp_path):
    log = open_log(tmp_path / "t-0")
    put(log, [rec(b"k", expected=7, headers=[(VERSION_HEADER, b"3")])])
    assert log.key_index is None
    assert not (tmp_path / "t-0" / FILE_NAME).exists()
    assert all_records(log)[0].headers == ((VERSION_HEADER, b"3"), (EXPECTED_HEADER, b"7"))


# -- reads ---------------------------------------------------------------------------------------
def test_reads_by_key_touch_only_the_keys_batches(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    for i in range(40):
        put(log, [rec(b"k%d" % (i % 4), b"v%d" % i), rec(b"noise", b"n")], codec=i % 5)
    events = read_events(log, b"k1")
    assert [v for v, _ in events] == list(range(10))
    assert [r.value for _, r in events] == [b"v%d" % i for i in range(1, 40, 4)]
    assert [v for v, _ in read_events(log, b"k1", from_version=8)] == [8, 9]
    assert [v for v, _ in read_events(log, b"k1", 3, limit=2)] == [3, 4]
    assert read_events(log, b"missing") == []
    got = read_records(log, [0, 2, 3, 999, -1])
    assert [r.offset for r in got] == [0, 2, 3]


# -- recovery ------------------------------------------------------------------------------------
def test_restart_and_missing_or_unreadable_file_rebuild_the_same(tmp_path, caplog):
    path = tmp_path / "t-0"
    log = open_log(path, vconfig())
    for i in range(30):
        put(log, [rec(b"k%d" % (i % 3)), rec(b"j")], codec=i % 5)
    before = (log.key_index.rows(), log.key_index.counts())
    log.close()
    log = open_log(path, vconfig())
    assert (log.key_index.rows(), log.key_index.counts()) == before
    log.close()
    for name in key_index_module.FILES:
        (path / name).unlink(missing_ok=True)
    log = open_log(path, vconfig())
    assert "key version index missing" in caplog.text
    assert (log.key_index.rows(), log.key_index.counts()) == before
    log.close()
    for name in key_index_module.FILES:
        (path / name).unlink(missing_ok=True)
    (path / FILE_NAME).write_bytes(b"not a database" * 100)
    log = open_log(path, vconfig())
    assert "unreadable" in caplog.text
    assert (log.key_index.rows(), log.key_index.counts()) == before
    assert_agrees(log)


def test_an_index_in_an_old_format_is_rebuilt(tmp_path, caplog):
    """Format 1 kept counts in a keys table: such a file is rebuilt from the log."""
    path = tmp_path / "t-0"
    log = open_log(path, vconfig())
    for i in range(10):
        put(log, [rec(b"k%d" % (i % 3))])
    before = (log.key_index.rows(), log.key_index.counts())
    log.close()
    db = sqlite3.connect(path / FILE_NAME)
    db.execute("DELETE FROM meta WHERE name = 'format'")
    db.execute("DELETE FROM events")
    db.commit()
    db.close()
    log = open_log(path, vconfig())
    assert "key version index in format 1, not 2; rebuilding it" in caplog.text
    assert (log.key_index.rows(), log.key_index.counts()) == before
    assert_agrees(log)


def test_an_index_ahead_of_the_log_is_cut_back(tmp_path):
    """A log tail lost (cut at open) while the index kept it: counts go back."""
    path = tmp_path / "t-0"
    log = open_log(path, vconfig())
    for i in range(10):
        put(log, [rec(b"k%d" % (i % 2))])
    end = log.active.size
    for i in range(10):
        put(log, [rec(b"k%d" % (i % 3))])
    for seg in log.segments:  # crash: no close
        seg.close()
    with open(path / f"{log.active.base_offset:020d}.log", "r+b") as f:
        f.truncate(end if len(log.segments) == 1 else 0)
    reopened = open_log(path, vconfig())
    assert reopened.end_offset < 20
    assert_agrees(reopened)
    put(reopened, [rec(b"k2", expected=reopened.key_index.version_count(b"k2"))])
    assert_agrees(reopened)


def test_a_failed_index_write_is_caught_up_from_the_log(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", vconfig())
    put(log, [rec(b"a")])
    real = KeyIndex.record_batch

    def failing(self, rows, base, end, counts):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(KeyIndex, "record_batch", failing)
    put(log, [rec(b"a")])  # appended; its rows not indexed
    monkeypatch.setattr(KeyIndex, "record_batch", real)
    assert log.key_index.end < log.end_offset
    put(log, [rec(b"a", expected=2)])  # caught up first, so the check sees both
    assert_agrees(log)


def test_opting_in_later_numbers_earlier_records_by_order_and_opting_out_keeps_the_file(
    tmp_path,
):
    path = tmp_path / "t-0"
    log = open_log(path)
    put(log, [rec(b"a"), rec(b"b"), rec(b"a")])
    log.update_config(vconfig())
    assert log.key_index.events(b"a") == [(0, 0), (1, 2)]
    put(log, [rec(b"a", expected=2)])
    assert all_records(log)[-1].headers == ((EXPECTED_HEADER, b"2"), (VERSION_HEADER, b"2"))
    log.update_config(small_config())
    assert log.key_index is None and (path / FILE_NAME).exists()
    put(log, [rec(b"a")])  # not numbered
    log.close()
    log = open_log(path, vconfig())  # the file says it was not maintained: rebuilt
    assert log.key_index.events(b"a") == [(0, 0), (1, 2), (2, 3), (3, 4)]


def test_truncation_sets_counts_back(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    for i in range(12):
        put(log, [rec(b"k%d" % (i % 3))])
    log.truncate_to(7)
    assert log.key_index.counts() == {b"k0": 3, b"k1": 2, b"k2": 2}
    assert_agrees(log)
    log.truncate_fully_and_start_at(20)
    assert log.key_index.rows() == [] and log.key_index.end == 20
    assert log.key_index.counts() == {b"k0": 3, b"k1": 2, b"k2": 2}  # numbers stay used
    put(log, [rec(b"k0", expected=3)])


def test_retention_removes_rows_and_keeps_counts(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig(segment_bytes=200))
    for i in range(20):
        put(log, [rec(b"k%d" % (i % 2))])
    log.delete_records(11)
    assert all(o >= 11 for _, _, o in log.key_index.rows())
    assert log.key_index.events(b"k0")[0] == (6, 12)
    assert log.key_index.counts() == {b"k0": 10, b"k1": 10}
    with pytest.raises(VersionError):
        put(log, [rec(b"k0", expected=0)])
    put(log, [rec(b"k0", expected=10)])
    log.close()
    log = open_log(tmp_path / "t-0", vconfig(segment_bytes=200))
    assert log.key_index.counts() == {b"k0": 11, b"k1": 10}
    assert log.key_index.events(b"k1")[0][1] >= log.start_offset


def test_compaction_removes_rows_of_removed_records(tmp_path):
    config = vconfig(segment_bytes=300, cleanup_policy="compact")
    log = open_log(tmp_path / "t-0", config)
    for i in range(30):
        put(log, [rec(b"k%d" % (i % 3), b"v%d" % i)])
    assert len(log.segments) > 3
    log.compact(NOW)
    kept = {r.offset for r in all_records(log)}
    rows = log.key_index.rows()
    assert {o for _, _, o in rows} == kept
    assert log.key_index.counts() == {b"k0": 10, b"k1": 10, b"k2": 10}
    # What is read for a key is what the log still holds, with its version.
    for key in (b"k0", b"k1", b"k2"):
        got = read_events(log, key)
        assert got and all(header_version(r) == v for v, r in got)
    put(log, [rec(b"k0", expected=10)])
    assert_agrees(log, {b"k0": 11, b"k1": 10, b"k2": 10})


def test_a_follower_indexes_the_leaders_versions(tmp_path):
    leader = open_log(tmp_path / "l" / "t-0", vconfig(segment_bytes=400))
    for i in range(25):
        put(leader, [rec(b"k%d" % (i % 4)), rec(None)], codec=i % 5)
    follower = open_log(tmp_path / "f" / "t-0", vconfig(segment_bytes=400))
    while follower.end_offset < leader.end_offset:
        follower.append_replicated(leader.read(follower.end_offset, 700), NOW)
    assert follower.key_index.rows() == leader.key_index.rows()
    assert follower.key_index.counts() == leader.key_index.counts()
    follower.truncate_to(20)
    assert_agrees(follower)


def test_a_follower_starting_over_copies_counts_of_deleted_keys_from_its_leader(tmp_path):
    leader = open_log(tmp_path / "l" / "t-0", vconfig(segment_bytes=300))
    follower = open_log(tmp_path / "f" / "t-0", vconfig(segment_bytes=300))
    put(leader, [rec(b"early", expected=0)])
    follower.append_replicated(leader.read(0, 10_000), NOW)  # the follower saw "early"
    for i in range(30):  # then was away while these came and went
        put(leader, [rec(b"gone-%d" % (i % 15)), rec(b"")])
    put(leader, [rec(b"kept"), rec(b"early")])
    start = leader.end_offset - 2
    leader.delete_records(start)
    assert leader.key_index.version_count(b"gone-3") == 2

    follower.start_over_at_leader_start(start)  # its log ended below the leader's start
    assert follower.key_floor == start
    assert follower.key_index.version_count(b"gone-3") == 0
    follower.close()  # a restart in the middle keeps the copy still to do
    follower = open_log(tmp_path / "f" / "t-0", vconfig(segment_bytes=300))
    assert follower.key_floor == start

    after, copied = None, []
    while True:  # as cluster.replica_fetcher pages through KeyCounts, 3 keys a page
        counts = leader.key_counts_below(start, after, 4)
        page, more = counts[:3], len(counts) > 3
        follower.raise_key_counts(page, done=not more)
        copied.append(page)
        if not more:
            break
        after = page[-1][0]
    # 15 "gone-" keys and b"" (the empty key is a key too); "early" has a record above.
    assert len(copied) == 6 and copied[0][0] == (b"", 30)
    assert sorted(k for page in copied for k, _ in page) == [b""] + sorted(
        b"gone-%d" % i for i in range(15))
    assert follower.key_floor == 0
    while follower.end_offset < leader.end_offset:
        follower.append_replicated(leader.read(follower.end_offset, 10_000), NOW)
    assert follower.key_index.counts() == leader.key_index.counts()
    # Once it leads, a deleted key goes on at its next number.
    with pytest.raises(VersionError):
        put(follower, [rec(b"gone-3", expected=0)])
    put(follower, [rec(b"gone-3", expected=2), rec(b"early", expected=2)])
    follower.close()
    follower = open_log(tmp_path / "f" / "t-0", vconfig(segment_bytes=300))
    assert follower.key_index.version_count(b"gone-3") == 3
    assert follower.key_floor == 0


def test_a_torn_tail_below_the_saved_log_start_starts_the_log_there(tmp_path):
    """Found by VersionsMachine: DeleteRecords inside the last batch, then a crash that
    tore that batch. The log used to start again at 0, handing out offset 0 twice and
    numbering key a from 0 again."""
    log = open_log(tmp_path / "t-0", vconfig())
    put(log, [rec(b"a"), rec(b"a")])
    log.delete_records(1)
    active = tmp_path / "t-0" / f"{log.active.base_offset:020d}.log"
    for seg in log.segments:
        seg.close()
    log.key_index.close()
    with open(active, "r+b") as f:
        f.truncate(active.stat().st_size - 1)
    log = open_log(tmp_path / "t-0", vconfig())
    assert (log.start_offset, log.end_offset) == (1, 1)
    assert log.key_index.version_count(b"a") == 1  # version 0 went with offset 0
    assert put(log, [rec(b"a", expected=1)]).base_offset == 1
    log.close()


def test_truncation_inside_a_batch_straddling_the_log_start_keeps_the_start(tmp_path):
    """Found by VersionsMachine: a cut at offset 1 removes the batch 0-1 whole; the log
    used to end, and start, at 0 again."""
    log = open_log(tmp_path / "t-0", vconfig())
    put(log, [rec(b"a"), rec(b"a")])
    log.delete_records(1)
    log.truncate_to(1)
    assert (log.start_offset, log.end_offset) == (1, 1)
    assert log.key_index.version_count(b"a") == 1
    assert put(log, [rec(b"a", expected=1)]).base_offset == 1
    log.close()
    log = open_log(tmp_path / "t-0", vconfig())
    assert (log.start_offset, log.end_offset) == (1, 2)
    assert_agrees(log, {b"a": 2})
    log.close()


def test_memory_holds_a_bounded_number_of_keys(tmp_path):
    log = open_log(tmp_path / "t-0", vconfig())
    log.key_index._hot_max = 50
    for i in range(100):
        put(log, [rec(b"key-%d" % j) for j in range(i * 20, i * 20 + 20)])
    assert log.key_index.keys_count() == 2000
    assert len(log.key_index._hot) <= 50
    assert log.key_index.version_count(b"key-5") == 1


def test_the_catalog_removes_the_index_with_its_partition(tmp_path):
    from chronik.storage.catalog import Catalog

    catalog = Catalog(tmp_path / "data")
    catalog.load()
    catalog.create_topic("ev", 1, {"key.versioning.enable": "true"})
    log = catalog.partition("ev", 0)
    put(log, [rec(b"a")])
    assert (tmp_path / "data" / "ev-0" / FILE_NAME).exists()
    catalog.close()
    catalog = Catalog(tmp_path / "data")
    catalog.load()
    assert catalog.partition("ev", 0).key_index.version_count(b"a") == 1
    catalog.delete_topic("ev")
    assert not any(p.name.startswith("ev-0") for p in (tmp_path / "data").iterdir())
    catalog.close()


# -- a model: appends, conditional appends, retries, restarts, crashes, retention -----------
class VersionsMachine(RuleBasedStateMachine):
    """The model: the key of each record in offset order. Versions per key are 0..n-1
    (records below the log start keep their numbers used), and the index agrees with a
    scan of the log after every step."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.path = Path(tempfile.mkdtemp()) / "t-0"
        self.config = vconfig(segment_bytes=500)
        self.log = open_log(self.path, self.config)
        self.keys: list[bytes] = []  # model: key of each offset
        self.seq = 0
        self.last_batch: list[Record] | None = None

    def count(self, key: bytes) -> int:
        return self.keys.count(key)

    @rule(
        picks=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.integers(-1, 2)),
                       min_size=1, max_size=4),
        codec=st.sampled_from([0, 1, 3]),
    )
    def append(self, picks, codec):
        """Records with expected versions: -1 none, 0 the right one, 1 one too high,
        2 one too low (when possible)."""
        pending: dict[bytes, int] = {}
        records = []
        ok = True
        for key, mode in picks:
            n = pending.get(key, self.count(key))
            expected = None
            if mode == 0:
                expected = n
            elif mode == 1:
                expected, ok = n + 1, False
            elif mode == 2 and n > 0:
                expected, ok = n - 1, False
            records.append(rec(key, expected=expected))
            pending[key] = n + 1
        try:
            put(self.log, records, codec, pid=1, epoch=0, seq=self.seq)
        except VersionError:
            assert not ok
            return
        assert ok
        self.seq += len(records)
        self.last_batch = records
        self.keys += [key for key, _ in picks]

    @rule()
    def retry(self):
        if self.last_batch is None:
            return
        n = len(self.last_batch)
        result = put(self.log, self.last_batch, pid=1, epoch=0, seq=self.seq - n)
        assert result.duplicate

    @rule()
    def restart(self):
        self.log.close()
        self.log = open_log(self.path, self.config)

    @rule(cut=st.integers(0, 200))
    def crash(self, cut):
        """Drop the log without close, its last segment cut by ``cut`` bytes."""
        old = self.log
        active = self.path / f"{old.active.base_offset:020d}.log"
        for seg in old.segments:
            seg.close()
        size = active.stat().st_size
        with open(active, "r+b") as f:
            f.truncate(max(0, size - cut))
        self.log = open_log(self.path, self.config)
        old.key_index.close()
        del self.keys[self.log.end_offset :]
        self.last_batch = None
        self.seq = 0  # the producer state may be gone: a new epoch starts over
        self.log.producer_state.producers = {}

    @rule(back=st.integers(1, 6))
    def truncate(self, back):
        target = max(self.log.start_offset, self.log.end_offset - back)
        self.log.truncate_to(target)
        del self.keys[self.log.end_offset :]
        self.last_batch = None
        self.log.producer_state.producers = {}
        self.seq = 0

    @rule(ahead=st.integers(0, 6))
    def retain(self, ahead):
        """Retention or DeleteRecords: the log start moves up; the numbers stay used."""
        self.log.delete_records(min(self.log.end_offset, self.log.start_offset + ahead))

    @invariant()
    def agrees(self):
        counts = {}
        for key in set(self.keys):
            counts[key] = self.keys.count(key)
        start = self.log.start_offset
        seen: dict[bytes, int] = {}
        expected = []
        for offset, key in enumerate(self.keys):
            version = seen.get(key, 0)
            seen[key] = version + 1
            if offset >= start:
                expected.append((key, version, offset))
        assert scan(self.log) == expected
        assert_agrees(self.log, counts)

    def teardown(self):
        self.log.close()


TestVersionsMachine = VersionsMachine.TestCase
TestVersionsMachine.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, suppress_health_check=HC
)
