from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.records import compression
from chronik.records.batch import check_crc, read_header, validate_produced
from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_records
from chronik.records.recompress import recompress, target_codec

codecs = st.sampled_from(
    [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
)
records = st.lists(
    st.builds(
        Record,
        timestamp=st.integers(0, 2**40),
        key=st.one_of(st.none(), st.binary(max_size=20)),
        value=st.one_of(st.none(), st.binary(max_size=200)),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2
        ).map(tuple),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=80, deadline=None)
@given(recs=records, source=codecs, target=codecs)
def test_recompressed_batch_holds_the_same_records(recs, source, target) -> None:
    batch = bytearray(
        build_batch(recs, compression=source, producer_id=7, producer_epoch=1, base_sequence=3)
    )
    header = validate_produced(batch, 10**9)
    out, new_header = recompress(batch, header, target)
    assert new_header.compression == target
    assert check_crc(out, new_header)
    assert new_header.size == len(out)
    for field in (
        "records_count",
        "last_offset_delta",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "max_timestamp",
    ):
        assert getattr(new_header, field) == getattr(header, field)
    before = [(r.key, r.value, r.timestamp, tuple(r.headers)) for r in iter_records(bytes(batch))]
    after = [(r.key, r.value, r.timestamp, tuple(r.headers)) for r in iter_records(bytes(out))]
    assert before == after


def test_same_codec_is_untouched() -> None:
    batch = bytearray(build_batch([Record(1, b"k", b"v")], compression=compression.LZ4))
    header = read_header(batch)
    out, _ = recompress(batch, header, compression.LZ4)
    assert out is batch


def test_topic_values() -> None:
    assert target_codec("producer") is None
    assert target_codec("uncompressed") == compression.NONE
    assert target_codec("zstd") == compression.ZSTD
