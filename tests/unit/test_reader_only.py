"""iter_records(batch, only=...): just the records at the wanted offsets, the others
stepped over undecoded, in every codec."""

from __future__ import annotations

import pytest

from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_records


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_only_the_wanted_offsets_come_back(codec: int) -> None:
    records = [
        Record(1000 + i, b"k%d" % (i % 7) if i % 5 else None, b"v" * i, (("h", b"%d" % i),))
        for i in range(300)
    ]
    batch = build_batch(records, base_offset=5000, compression=codec)
    everything = list(iter_records(batch))
    for wanted in ({5000}, {5299}, {5003, 5150, 5298}, set(range(5000, 5300, 3))):
        assert list(iter_records(batch, only=wanted)) == [
            r for r in everything if r.offset in wanted
        ]
    assert list(iter_records(batch, only=set())) == []
    assert list(iter_records(batch, only={4999, 5300})) == []
