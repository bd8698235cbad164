"""Record batch builder/reader round trips, with every codec."""
from __future__ import annotations

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.records import compression
from chronik.records.batch import TIMESTAMP_TYPE_BIT, check_crc, read_header, validate_produced
from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_batches, iter_records
from chronik.records.varint import read_varint, write_varint

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]

maybe_bytes = st.none() | st.binary(max_size=300)
records_st = st.lists(
    st.builds(
        Record,
        timestamp=st.integers(0, 2**41),
        key=maybe_bytes,
        value=maybe_bytes,
        headers=st.lists(
            st.tuples(st.text(max_size=10), maybe_bytes), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(records=records_st, codec=st.sampled_from(CODECS), base=st.integers(0, 2**40))
def test_build_then_read_gives_the_records_back(records, codec, base):
    batch = build_batch(records, base_offset=base, compression=codec)
    header = read_header(batch)
    assert header.size == len(batch)
    assert header.compression == codec
    assert header.records_count == len(records)
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert check_crc(batch, header)
    decoded = list(iter_records(batch))
    assert [d.offset for d in decoded] == [base + i for i in range(len(records))]
    assert [(d.timestamp, d.key, d.value, d.headers) for d in decoded] == [
        (r.timestamp, r.key, r.value, r.headers) for r in records
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_built_batches_pass_produce_validation(codec):
    batch = build_batch([Record(1, b"k", b"v" * 1000)] * 10, compression=codec,
                        producer_id=5, producer_epoch=1, base_sequence=0)
    header = validate_produced(batch, 1 << 20)
    assert header.producer_id == 5 and header.last_sequence == 9


def test_offset_deltas_keep_gaps():
    batch = build_batch([Record(1, b"a", b"1"), Record(2, b"b", b"2")], base_offset=10,
                        offset_deltas=[0, 5])
    assert [r.offset for r in iter_records(batch)] == [10, 15]
    assert read_header(batch).last_offset == 15


def test_log_append_time_reports_the_batch_time_for_every_record():
    batch = build_batch([Record(1, None, b"x"), Record(2, None, b"y")], log_append_time=99)
    assert read_header(batch).attributes & TIMESTAMP_TYPE_BIT
    assert [r.timestamp for r in iter_records(batch)] == [99, 99]


@given(data=st.binary(max_size=200_000))
@settings(max_examples=20, deadline=None)
def test_codecs_round_trip(data):
    for codec in CODECS:
        assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_snappy_reads_xerial_framing_and_raw_blocks():
    data = b"chronik " * 20_000
    framed = compression.compress(compression.SNAPPY, data)
    assert framed.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.SNAPPY, framed) == data
    raw = bytes(cramjam.snappy.compress_raw(data))  # what librdkafka writes
    assert compression.decompress(compression.SNAPPY, raw) == data


def test_lz4_frames_use_independent_blocks_without_content_checksum():
    frame = compression.compress(compression.LZ4, b"x" * 100)
    flg = frame[4]
    assert flg & 0x20  # block independence, which Kafka's Java reader requires
    assert not flg & 0x04


def test_iter_batches_stops_at_a_truncated_tail():
    batches = [build_batch([Record(i, None, b"v" * i)], base_offset=i) for i in range(1, 6)]
    buf = b"".join(batches)
    for cut in range(len(buf)):
        found = list(iter_batches(buf[:cut]))
        whole = 0
        total = 0
        for b in batches:
            if total + len(b) <= cut:
                whole += 1
                total += len(b)
        assert len(found) == whole


@given(st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(n):
    out = bytearray()
    write_varint(out, n)
    assert read_varint(bytes(out), 0) == (n, len(out))
