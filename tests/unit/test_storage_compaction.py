"""Compaction keeps the latest record per key, offsets preserved, and swaps files safely."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, all_records, append, open_log, small_config

from chronik.records import compression
from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.storage.compaction import (
    clean_segment,
    commit_swap,
    finish_interrupted_swaps,
    latest_offsets,
)

HC = [HealthCheck.function_scoped_fixture]


def keyed(key: bytes, value: bytes | None, ts: int = NOW, codec: int = 0) -> bytearray:
    return bytearray(build_batch([Record(ts, key, value)], compression=codec))


def compact_config(**kw):
    return small_config(cleanup_policy="compact", **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.binary(max_size=60)),
        min_size=1,
        max_size=120,
    ),
    codec=st.sampled_from([compression.NONE, compression.ZSTD, compression.SNAPPY]),
)
def test_compaction_keeps_latest_per_key_with_offsets(tmp_path_factory, writes, codec):
    log = open_log(tmp_path_factory.mktemp("c") / "t-0", compact_config())
    for key, value in writes:
        append(log, keyed(key, value, codec=codec))
    closed_end = log.active.base_offset
    before = all_records(log)
    log.compact(NOW)
    after = all_records(log)
    latest = {}
    for rec in before:
        if rec.offset < closed_end:
            latest[rec.key] = rec.offset
    expected = [
        r for r in before if r.offset >= closed_end or latest.get(r.key) == r.offset
    ]
    assert after == expected
    assert log.end_offset == len(writes)
    log.close()
    again = open_log(log.directory, compact_config())
    assert all_records(again) == expected


def test_multi_record_batches_are_rewritten_and_tombstones_expire(tmp_path):
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=400, delete_retention_ms=1000))
    batch = bytearray(build_batch(
        [Record(NOW, b"k1", b"old"), Record(NOW, b"k2", b"keep"), Record(NOW, b"k3", b"x")],
        compression=compression.GZIP,
    ))
    append(log, batch)
    append(log, keyed(b"k1", b"new"))
    append(log, keyed(b"k3", None))  # tombstone
    for i in range(10):
        append(log, keyed(b"filler%d" % i, b"f" * 50))
    log.compact(NOW + 10)  # tombstone still young: kept
    recs = {r.offset: (r.key, r.value) for r in all_records(log)}
    assert recs[1] == (b"k2", b"keep") and 0 not in recs and 2 not in recs
    assert recs[3] == (b"k1", b"new") and recs[4] == (b"k3", None)
    log.compact(NOW + 5000)
    recs = {r.offset: (r.key, r.value) for r in all_records(log)}
    assert 4 not in recs and recs[1] == (b"k2", b"keep")
    # reads at a compacted-away offset land on the next batch
    first = read_header(log.read(2, 100))
    assert first.last_offset >= 2


def test_maybe_compact_only_for_compact_policy_and_new_segments(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=300))
    for _ in range(10):
        append(log, keyed(b"same", b"v" * 50))
    assert log.maybe_compact(NOW) == 0  # delete policy
    log.update_config(compact_config(segment_bytes=300))
    assert log.maybe_compact(NOW) > 0
    assert log.maybe_compact(NOW) == 0  # nothing rolled since


@pytest.mark.parametrize("committed", [True, False])
def test_interrupted_swap_is_finished_or_dropped_at_open(tmp_path, committed):
    path = tmp_path / "t-0"
    log = open_log(path, compact_config(segment_bytes=300))
    for i in range(12):
        append(log, keyed(b"k", b"%d" % i * 30))
    seg = log.segments[0]
    latest = latest_offsets(log.segments[:-1])
    assert clean_segment(seg, latest, NOW, 10**9) > 0
    commit_swap(path, seg.base_offset)  # .swap files written, not yet used
    if not committed:
        (path / (seg.log_path.name + ".swap")).unlink()
    for s in log.segments:
        s.close()
    again = open_log(path, compact_config(segment_bytes=300))
    assert not list(path.glob("*.swap")) and not list(path.glob("*.cleaned"))
    offsets = [r.offset for r in all_records(again)]
    if committed:
        assert offsets[0] > 0  # the first segment's superseded records are gone
    else:
        assert offsets[0] == 0
    assert offsets[-1] == 11
    finish_interrupted_swaps(path)


def _keys(log) -> list[bytes]:
    return [r.key for r in all_records(log)]


def test_min_compaction_lag_leaves_young_segments_as_written(tmp_path):
    config = compact_config(segment_bytes=300, min_compaction_lag_ms=60_000)
    log = open_log(tmp_path / "t-0", config)
    for _ in range(8):
        append(log, keyed(b"old", b"v" * 50, ts=NOW - 120_000))
    for _ in range(8):
        append(log, keyed(b"young", b"v" * 50, ts=NOW))
    young_before = _keys(log).count(b"young")
    assert log.maybe_compact(NOW) > 0
    keys = _keys(log)
    assert keys.count(b"old") == 1  # old enough: compacted
    assert keys.count(b"young") == young_before  # within the lag: every copy is still there
    # Once the lag has passed, the rest is compacted too.
    assert log.maybe_compact(NOW + 120_000) > 0
    in_active = sum(1 for r in all_records(log) if r.offset >= log.active.base_offset)
    assert _keys(log).count(b"young") == 1 + in_active


def test_dirty_ratio_decides_when_a_compaction_is_due(tmp_path):
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=300,
                                                   min_cleanable_dirty_ratio=0.6))
    for i in range(40):
        append(log, keyed(b"k%d" % i, b"v" * 50))  # distinct keys: compaction saves nothing
    assert log.maybe_compact(NOW) == 0  # the first pass: everything was dirty, nothing to drop
    rolled = log.active.base_offset
    for _ in range(4):
        append(log, keyed(b"k0", b"w" * 50))
    assert log.active.base_offset > rolled
    job = log.compaction_job(NOW)
    assert job is None  # a small dirty tail: below the ratio, not due
    for _ in range(80):
        append(log, keyed(b"k1", b"x" * 50))
    assert log.maybe_compact(NOW) > 0  # now most of the log is dirty


def test_max_compaction_lag_forces_a_compaction_below_the_ratio(tmp_path):
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=300,
                                                   min_cleanable_dirty_ratio=0.99,
                                                   max_compaction_lag_ms=10_000))
    for i in range(40):
        append(log, keyed(b"k%d" % i, b"v" * 50))
    log.maybe_compact(NOW)
    for _ in range(6):
        append(log, keyed(b"k0", b"w" * 50))
    assert log.compaction_job(NOW) is None
    assert log.maybe_compact(NOW + 60_000) > 0


def test_undecodable_batch_is_kept_and_the_rest_compacts(tmp_path):
    # A client can seal junk records with a valid CRC (produce does not decode records);
    # compaction keeps such a batch as it is instead of failing on every pass.
    import struct

    from crc32c import crc32c

    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=400))
    junk = keyed(b"j", b"v" * 40, codec=compression.GZIP)
    junk[61:] = b"\x5a" * (len(junk) - 61)
    struct.pack_into(">I", junk, 17, crc32c(bytes(junk[21:])))
    append(log, keyed(b"k", b"old"))
    append(log, junk)
    append(log, keyed(b"k", b"new"))
    for i in range(10):
        append(log, keyed(b"filler%d" % i, b"f" * 50))
    log.compact(NOW)
    stored = [read_header(seg.read(pos, h.size)) for seg in log.segments
              for pos, h in seg.headers_from(0)]
    offsets = [h.base_offset for h in stored]
    assert 0 not in offsets  # the old value of k went
    assert 1 in offsets and 2 in offsets  # the junk batch and the new value stayed
