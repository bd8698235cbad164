"""Offset and time index lookups, in memory (active) and from disk (closed)."""
from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.storage.offset_index import OffsetIndex
from chronik.storage.time_index import TimeIndex

increments = st.lists(st.integers(1, 1000), min_size=0, max_size=200)


@settings(max_examples=50, deadline=None)
@given(gaps=increments, probes=st.lists(st.integers(0, 300_000), max_size=30))
def test_offset_index_floor_lookup_active_and_closed(tmp_path_factory, gaps, probes):
    path = tmp_path_factory.mktemp("idx") / "00000000000000001000.index"
    base = 1000
    idx = OffsetIndex(path, base)
    idx.open_active(reset=True)
    offsets, positions = [], []
    off, pos = base, 0
    for g in gaps:
        off += g
        pos += g * 10
        idx.append(off, pos)
        offsets.append(off)
        positions.append(pos)

    def expected(target):
        i = bisect.bisect_right(offsets, target) - 1
        return (offsets[i], positions[i]) if i >= 0 else (base, 0)

    def expected_by_pos(target):
        i = bisect.bisect_right(positions, target) - 1
        return (offsets[i], positions[i]) if i >= 0 else (base, 0)

    probes = probes + offsets
    for target in probes:
        assert idx.lookup(target) == expected(target)
        assert idx.lookup_position(target) == expected_by_pos(target)
    idx.seal()
    assert path.stat().st_size == 8 * len(offsets)
    closed = OffsetIndex(path, base)
    closed.open_closed()
    for target in probes:
        assert closed.lookup(target) == expected(target)
        assert closed.lookup_position(target) == expected_by_pos(target)


def test_time_index_keeps_only_growing_timestamps(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 0)
    idx.open_active(reset=True)
    idx.maybe_append(100, 5)
    idx.maybe_append(90, 7)  # not larger: skipped
    idx.maybe_append(200, 9)
    assert idx.entries == 2
    assert idx.lookup(50) == (-1, 0)
    assert idx.lookup(150) == (100, 5)
    assert idx.lookup(500) == (200, 9)
    idx.seal()
    closed = TimeIndex(tmp_path / "0.timeindex", 0)
    closed.open_closed()
    assert closed.last() == (200, 9)
    assert closed.lookup(199) == (100, 5)


def test_torn_index_file_is_trimmed_to_whole_entries(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0)
    idx.open_active(reset=True)
    idx.append(3, 100)
    idx.append(9, 400)
    idx.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")
    again = OffsetIndex(path, 0)
    again.open_active(reset=False)
    assert again.entries == 2 and again.lookup(10) == (9, 400)
