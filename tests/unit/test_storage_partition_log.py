"""PartitionLog: appends, reads, rolls, recovery, retention, timestamps."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, all_records, append, client_batch, open_log, small_config

from chronik.records.batch import read_header
from chronik.records.reader import iter_batches, iter_records
from chronik.storage.errors import OFFSET_OUT_OF_RANGE, OffsetOutOfRange

HC = [HealthCheck.function_scoped_fixture]


def fill(log, sizes):
    results = []
    for i, n in enumerate(sizes):
        results.append(append(log, client_batch(n, ts=NOW + i, value=b"%d" % i * 7)))
    return results


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=60))
def test_read_at_every_offset_returns_the_batch_holding_it(tmp_path_factory, sizes):
    log = open_log(tmp_path_factory.mktemp("log") / "t-0")
    results = fill(log, sizes)
    assert [r.base_offset for r in results] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert log.end_offset == sum(sizes)
    assert len(log.segments) > 1 or log.size_bytes <= 1500
    for offset in range(log.end_offset):
        data = log.read(offset, 1)
        batches = list(iter_batches(data))
        assert len(batches) == 1  # at least one whole batch even over max_bytes
        assert batches[0][1].base_offset <= offset <= batches[0][1].last_offset
        big = log.read(offset, 10_000)
        positions = list(iter_batches(big))
        assert sum(h.size for _, h in positions) == len(big)  # whole batches only
        assert len(big) <= 10_000
    assert log.read(log.end_offset, 100) == b""
    log.close()


def test_round_trip_across_rolls_and_restart(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [3] * 50)
    before = all_records(log)
    assert [r.offset for r in before] == list(range(150))
    assert len(log.segments) > 3
    log.close()
    again = open_log(tmp_path / "t-0")
    assert again.end_offset == 150
    assert all_records(again) == before
    r = append(again, client_batch(2))
    assert r.base_offset == 150
    again.close()


def test_out_of_range_reads(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [2, 2])
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(5, 100)
    assert info.value.code == OFFSET_OUT_OF_RANGE
    log.delete_records(2)
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100)
    assert log.read(2, 100)


def _crash(log):
    """Drop a log without close(): fds closed, no marker, no snapshot."""
    for seg in log.segments:
        seg.close()


@settings(max_examples=30, deadline=None, suppress_health_check=HC)
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=25), cut=st.integers(1, 400))
def test_recovery_keeps_the_intact_prefix_of_a_torn_tail(tmp_path_factory, sizes, cut):
    path = tmp_path_factory.mktemp("log") / "t-0"
    log = open_log(path, small_config(segment_bytes=10**6))
    fill(log, sizes)
    seg_path = log.active.log_path
    _crash(log)
    size = seg_path.stat().st_size
    cut = min(cut, size)
    os.truncate(seg_path, size - cut)
    whole = []
    with open(seg_path, "rb") as f:
        whole = list(iter_batches(f.read()))
    again = open_log(path, small_config(segment_bytes=10**6))
    expected_end = whole[-1][1].last_offset + 1 if whole else 0
    assert again.end_offset == expected_end
    assert again.recovered_bytes_truncated == size - cut - sum(h.size for _, h in whole)
    r = append(again, client_batch(1))
    assert r.base_offset == expected_end
    assert [x.offset for x in all_records(again)] == list(range(expected_end + 1))
    again.close()


def test_corrupt_crc_in_the_tail_is_truncated(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path, small_config(segment_bytes=10**6))
    fill(log, [2, 2, 2, 2])
    seg_path = log.active.log_path
    positions = [pos for pos, _ in iter_batches(seg_path.read_bytes())]
    _crash(log)
    with open(seg_path, "r+b") as f:
        f.seek(positions[2] + 70)  # inside the third batch's records
        byte = f.read(1)
        f.seek(positions[2] + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = open_log(path, small_config(segment_bytes=10**6))
    assert again.end_offset == 4
    assert seg_path.stat().st_size == positions[2]


def test_unclean_restart_rebuilds_indexes_and_keeps_earlier_segments(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    fill(log, [4] * 40)
    segments = len(log.segments)
    active_index = log.active.index.path
    _crash(log)
    active_index.write_bytes(b"\xff" * 16)  # garbage: must not be trusted
    again = open_log(path)
    assert len(again.segments) == segments
    assert again.end_offset == 160
    for offset in range(160):
        header = read_header(again.read(offset, 1))
        assert header.base_offset <= offset <= header.last_offset


def test_missing_index_of_a_closed_segment_is_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    fill(log, [4] * 40)
    first_index = log.segments[0].index.path
    log.close()
    first_index.unlink()
    again = open_log(path)
    assert first_index.exists()
    assert [r.offset for r in all_records(again)] == list(range(160))


def test_log_append_time_topic_stamps_the_broker_clock(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"))
    result = append(log, client_batch(3, ts=5), now=NOW + 123)
    assert result.log_append_time == NOW + 123
    data = log.read(0, 1000)
    assert [r.timestamp for r in iter_records(data)] == [NOW + 123] * 3
    header = read_header(data)
    from chronik.records.batch import check_crc

    assert check_crc(data, header)


def test_offset_for_timestamp_finds_the_earliest_record_at_or_after(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(60):
        append(log, client_batch(3, ts=NOW + i * 10))  # records at NOW+10i, +1, +2
    assert log.offset_for_timestamp(0) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 101) == (31, NOW + 101)
    assert log.offset_for_timestamp(NOW + 103) == (33, NOW + 110)
    assert log.offset_for_timestamp(NOW + 592) == (179, NOW + 592)
    assert log.offset_for_timestamp(NOW + 593) is None
    assert log.max_timestamp() == (NOW + 592, 179)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert again.offset_for_timestamp(NOW + 101) == (31, NOW + 101)
    assert again.max_timestamp() == (NOW + 592, 179)


def test_retention_by_time_deletes_old_segments_and_advances_start(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_ms=1000))
    for i in range(30):
        append(log, client_batch(2, ts=NOW + i))
    for i in range(30):
        append(log, client_batch(2, ts=NOW + 5000 + i))
    segments_before = len(log.segments)
    deleted = log.apply_retention(NOW + 5000 + 500)
    assert deleted > 0 and len(log.segments) == segments_before - deleted
    assert log.start_offset == log.segments[0].base_offset > 0
    assert log.end_offset == 120
    assert all(r.timestamp >= NOW for r in all_records(log))
    # everything expired: the active segment is rolled and deleted too, the end stays
    log.apply_retention(NOW + 100_000)
    assert log.start_offset == log.end_offset == 120
    assert append(log, client_batch(1)).base_offset == 120
    log.close()
    again = open_log(tmp_path / "t-0", small_config(retention_ms=1000))
    assert (again.start_offset, again.end_offset) == (120, 121)


def test_retention_by_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(retention_bytes=3000))
    fill(log, [3] * 80)
    log.apply_retention(NOW)
    assert log.size_bytes <= 3000 + 1500
    assert log.size_bytes - log.segments[0].size < 3000
    assert log.start_offset > 0 and log.end_offset == 240


def test_delete_records_moves_the_start_and_survives_restart(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, [3] * 40)
    assert log.delete_records(50) == 50
    assert log.segments[0].base_offset <= 50
    assert all_records(log)[0].offset == 50
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(1000)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert again.start_offset == 50


def test_flush_messages_fsyncs_when_reached(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(flush_interval_messages=5))
    append(log, client_batch(3))
    assert log.dirty and log.unflushed_messages == 3
    append(log, client_batch(3))
    assert not log.dirty and log.unflushed_messages == 0


def test_segment_rolls_by_age_of_record_time(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6, segment_ms=1000))
    append(log, client_batch(1, ts=NOW))
    append(log, client_batch(1, ts=NOW + 500))
    assert len(log.segments) == 1
    append(log, client_batch(1, ts=NOW + 1500))
    assert len(log.segments) == 2 and log.segments[1].base_offset == 2


def test_sequential_reads_follow_on(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    fill(log, [1] * 200)
    offset, seen = 0, []
    while offset < log.end_offset:
        data = log.read(offset, 300)
        for _, h in iter_batches(data):
            seen.append(h.base_offset)
            offset = h.last_offset + 1
    assert seen == list(range(200))


@pytest.mark.parametrize("cut", [1, 7, 60, 200])
def test_a_tail_cut_after_a_clean_close_is_still_recovered(tmp_path, cut):
    path = tmp_path / "t-0"
    log = open_log(path, small_config(segment_bytes=10**6, index_interval_bytes=0))
    fill(log, [1] * 20)
    seg_path = log.active.log_path
    log.close()  # the clean-shutdown marker is written
    size = seg_path.stat().st_size
    os.truncate(seg_path, size - cut)
    whole = list(iter_batches(seg_path.read_bytes()))
    again = open_log(path, small_config(segment_bytes=10**6, index_interval_bytes=0))
    assert again.end_offset == whole[-1][1].last_offset + 1
    assert append(again, client_batch(1)).base_offset == again.end_offset - 1
    assert [r.offset for r in all_records(again)] == list(range(again.end_offset))


def test_read_without_min_one_returns_nothing_when_the_first_batch_does_not_fit(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=10**6))
    fill(log, [3, 3, 3])
    first = log.read(0, 1)
    assert len(list(iter_batches(first))) == 1  # KIP-74: the first partition may go over
    assert log.read(0, len(first) - 1, min_one=False) == b""
    assert log.read(0, 0, min_one=False) == b""
    assert log.read(0, len(first), min_one=False) == first
    # Whole batches that fit are still served, and a refused read leaves the next
    # sequential read where it was.
    assert log.read(3, len(first) * 2, min_one=False) == log.read(3, len(first) * 2)
