"""The storage side of replication: a follower's appends, truncation, leader epochs,
the high watermark and its checkpoint."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, all_records, append, client_batch, open_log, small_config

from chronik.records.reader import iter_batches
from chronik.storage import hw_checkpoint
from chronik.storage.catalog import Catalog
from chronik.storage.leader_epoch import UNDEFINED, LeaderEpochCache

HC = [HealthCheck.function_scoped_fixture]


def leader_log(path, sizes, epochs=(0,), pid=-1):
    """A leader's log: batches of ``sizes`` records, the leader epoch moving through
    ``epochs`` (one per equal share of the batches)."""
    log = open_log(path)
    log.replicated = True
    share = max(1, len(sizes) // len(epochs))
    seq = 0
    for i, n in enumerate(sizes):
        log.leader_epoch = epochs[min(i // share, len(epochs) - 1)]
        batch = client_batch(n, ts=NOW + i, value=b"%d" % i * 9, pid=pid,
                             epoch=0 if pid >= 0 else -1, seq=seq if pid >= 0 else -1)
        append(log, batch)
        seq += n
    return log


def all_bytes(log, start=0):
    out = b""
    offset = start
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        out += data
        offset = list(iter_batches(data))[-1][1].last_offset + 1
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=40),
       chunk=st.integers(100, 5000))
def test_a_follower_holds_the_leaders_bytes(tmp_path_factory, sizes, chunk):
    base = tmp_path_factory.mktemp("r")
    leader = leader_log(base / "t-0", sizes, epochs=(0, 3, 4))
    follower = open_log(base / "f" / "t-0")
    while follower.end_offset < leader.end_offset:
        follower.append_replicated(leader.read(follower.end_offset, chunk), NOW)
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.epochs.entries == leader.epochs.entries
    assert [r.offset for r in all_records(follower)] == list(range(sum(sizes)))
    follower.close()
    reopened = open_log(base / "f" / "t-0")
    assert reopened.epochs.entries == leader.epochs.entries
    assert all_bytes(reopened) == all_bytes(leader)


def test_batches_below_the_end_or_corrupt_are_refused_and_nothing_appended(tmp_path):
    leader = leader_log(tmp_path / "t-0", [2, 2, 2])
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_replicated(leader.read(0, 1), NOW)
    with pytest.raises(ValueError):
        follower.append_replicated(leader.read(0, 1 << 20), NOW)  # offsets going back
    assert follower.end_offset == 2
    follower.truncate_to(0)
    data = bytearray(leader.read(0, 1 << 20))
    data[-1] ^= 0xFF
    with pytest.raises(ValueError):
        follower.append_replicated(data, NOW)
    assert follower.end_offset == 0
    follower.append_replicated(leader.read(0, 1 << 20)[:-3], NOW)  # a torn last batch
    assert follower.end_offset == 4


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 6), min_size=2, max_size=30), data=st.data())
def test_truncate_then_append_equals_a_log_that_never_had_the_tail(tmp_path_factory, sizes,
                                                                   data):
    base = tmp_path_factory.mktemp("t")
    cut = data.draw(st.integers(1, len(sizes) - 1))
    pid = 7
    full = leader_log(base / "a" / "t-0", sizes, pid=pid)
    kept = leader_log(base / "b" / "t-0", sizes[:cut], pid=pid)
    boundary = sum(sizes[:cut])
    full.truncate_to(boundary)
    assert full.end_offset == boundary
    assert all_bytes(full) == all_bytes(kept)
    assert list(full.producer_state.producers[pid].batches) == list(
        kept.producer_state.producers[pid].batches
    )
    # The same next batch lands at the same offset in both, and the log reopens whole.
    for log in (full, kept):
        append(log, client_batch(2, value=b"after"))
    assert all_bytes(full) == all_bytes(kept)
    full.segments[-1].close()  # a crash: no clean shutdown
    reopened = open_log(base / "a" / "t-0")
    assert all_bytes(reopened) == all_bytes(kept)
    assert reopened.end_offset == boundary + 2


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=20), data=st.data())
def test_a_follower_made_leader_takes_the_producers_retries_once(tmp_path_factory, sizes,
                                                                  data):
    """An idempotent producer's batches went to the old leader; the follower had copied
    some of them when it was made leader. The producer sends again the batches it had
    no answer for (at most 5: its requests in flight), in order: the ones the follower
    copied are duplicates, answered with their offsets on the old leader, the others
    are appended after them, so that every batch is in the new leader's log once, at
    the offset it had on the old leader, as Kafka's follower keeps the producer state
    of what it replicates."""
    base = tmp_path_factory.mktemp("p")
    pid = 7
    old = leader_log(base / "a" / "t-0", sizes, pid=pid)
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    n = len(sizes)
    unanswered = data.draw(st.integers(max(0, n - 5), n), label="first batch sent again")
    # Every batch answered before it is on the follower (acks=all).
    copied = data.draw(st.integers(unanswered, n), label="batches copied")
    follower = open_log(base / "b" / "t-0")
    end = firsts[copied] if copied < n else old.end_offset
    while follower.end_offset < end:
        chunk = old.read(follower.end_offset, 1 << 20, max_offset=end)
        follower.append_replicated(chunk, NOW)
    follower.leader_epoch = 1
    for i in range(unanswered, n):
        result = append(follower, client_batch(sizes[i], ts=NOW + i, value=b"%d" % i * 9,
                                               pid=pid, epoch=0, seq=firsts[i]))
        assert result.duplicate == (i < copied)
        assert result.base_offset == firsts[i]
    assert follower.end_offset == old.end_offset
    assert [r.value for r in all_records(follower)] == [r.value for r in all_records(old)]


def test_truncation_drops_later_epochs_and_lowers_the_high_watermark(tmp_path):
    log = leader_log(tmp_path / "t-0", [2] * 10, epochs=(1, 2))
    assert log.epochs.entries == [(1, 0), (2, 10)]
    log.set_high_watermark(16)
    log.truncate_to(8)
    assert log.epochs.entries == [(1, 0)]
    assert log.high_watermark == 8
    assert log.epochs.end_offset_for(1, log.end_offset) == (1, 8)


def test_truncate_fully_starts_over_at_the_leaders_start(tmp_path):
    log = leader_log(tmp_path / "t-0", [3, 3], epochs=(5,))
    log.truncate_fully_and_start_at(40)
    assert (log.start_offset, log.end_offset) == (40, 40)
    assert log.epochs.entries == []
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.start_offset, reopened.end_offset) == (40, 40)


def test_consumers_read_only_below_the_high_watermark(tmp_path):
    log = leader_log(tmp_path / "t-0", [2] * 6)
    assert log.high_watermark == 0  # replicated: the replica manager sets it
    assert log.read(0, 1 << 20, max_offset=log.high_watermark) == b""
    assert log.set_high_watermark(6)
    data = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert [h.last_offset for _, h in iter_batches(data)] == [1, 3, 5]
    assert not log.set_high_watermark(4)  # never back
    assert log.set_high_watermark(99) and log.high_watermark == 12  # at most the end
    log.replicated = False
    assert log.high_watermark == log.end_offset


def test_epoch_cache_answers_as_kafka(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == UNDEFINED
    cache.assign(2, 5)
    cache.assign(2, 9)  # an epoch keeps its first start
    cache.assign(4, 20)
    assert cache.entries == [(2, 5), (4, 20)]
    assert cache.end_offset_for(4, 30) == (4, 30)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 30) == (2, 20)  # an unknown epoch: the one below
    assert cache.end_offset_for(2, 30) == (2, 20)
    cache.truncate_from_end(20)
    assert LeaderEpochCache(tmp_path).entries == [(2, 5)]  # persisted


def test_high_watermarks_survive_a_restart_and_a_bad_checkpoint_is_ignored(tmp_path, caplog):
    catalog = Catalog(tmp_path, {"segment.bytes": str(small_config().segment_bytes)})
    catalog.load()
    topic = catalog.create_topic("t", 2, {})
    for p, plog in enumerate(topic.partitions):
        plog.replicated = True
        for _ in range(3):
            append(plog, client_batch(2))
        plog.set_high_watermark(2 + 2 * p)
    catalog.write_hw_checkpoint()
    catalog.close()
    again = Catalog(tmp_path)
    again.load()
    for p, plog in enumerate(again.get("t").partitions):
        plog.replicated = True
        assert plog.high_watermark == 2 + 2 * p
    again.close()
    (tmp_path / hw_checkpoint.NAME).write_text("0\n5\nt 0 x\n")
    assert hw_checkpoint.read(tmp_path) == {}
    assert "malformed" in caplog.text


# -- maintenance stays below the high watermark (Kafka's deletableSegments and
# -- cleanableOffsets): a new leader may not hold what the ISR does not hold yet.


def test_retention_deletes_only_segments_below_the_high_watermark(tmp_path):
    from test_storage_support import NOW, append, client_batch, open_log, small_config

    log = open_log(tmp_path / "t-0", small_config(retention_ms=1000))
    log.replicated = True
    for i in range(60):
        append(log, client_batch(2, ts=NOW + i))
    assert len(log.segments) > 3
    hw = log.segments[2].base_offset + 1  # inside the third segment
    log.set_high_watermark(hw)
    log.apply_retention(NOW + 100_000)  # every record is past retention
    assert log.start_offset <= hw
    assert log.start_offset == log.segments[0].base_offset == log._bases[0]
    assert log.segments[0].base_offset <= hw < log._bases[1]
    # Once the ISR holds everything, everything may go.
    log.set_high_watermark(log.end_offset)
    log.apply_retention(NOW + 100_000)
    assert log.start_offset == log.end_offset


def test_retention_by_bytes_stops_at_the_high_watermark(tmp_path):
    from test_storage_support import append, client_batch, open_log, small_config

    log = open_log(tmp_path / "t-0", small_config(retention_bytes=100))
    log.replicated = True
    for _ in range(60):
        append(log, client_batch(2))
    log.set_high_watermark(0)
    assert log.apply_retention(0) == 0
    assert log.start_offset == 0


def test_compaction_cleans_only_below_the_high_watermark(tmp_path):
    from test_storage_support import NOW, all_records, append, open_log, small_config

    from chronik.records.builder import Record, build_batch

    log = open_log(tmp_path / "t-0", small_config(segment_bytes=300, cleanup_policy="compact"))
    log.replicated = True
    for i in range(24):
        append(log, bytearray(build_batch([Record(NOW, b"k", b"v%d" % i + b"." * 50)])))
    assert len(log.segments) > 4
    log.set_high_watermark(0)
    assert log.maybe_compact(NOW) == 0  # the ISR holds nothing: nothing is cleaned
    hw = log._bases[2]
    log.set_high_watermark(hw)
    log.compact(NOW)
    offsets = [r.offset for r in all_records(log)]
    # Every record at or above the high watermark is still there, as written.
    assert [o for o in offsets if o >= hw] == list(range(hw, log.end_offset))
    # Below it, the key's older copies are gone.
    assert len([o for o in offsets if o < hw]) < hw
