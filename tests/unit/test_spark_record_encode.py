"""The sink's record batches built from Arrow columns are the bytes chronik.records.builder
writes record by record; its partitioners are librdkafka's."""

from __future__ import annotations

import random
import zlib

import pytest

pytest.importorskip("numba")
pa = pytest.importorskip("pyarrow")

import cramjam  # noqa: E402
import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from chronik.records import compression as codecs  # noqa: E402
from chronik.records.batch import read_header  # noqa: E402
from chronik.records.builder import Record, build_batch, encode_records  # noqa: E402
from chronik.records.partitioner import murmur2  # noqa: E402
from chronik.spark import record_encode as enc  # noqa: E402
from chronik.spark import sink_batches as sb  # noqa: E402
from chronik.spark.options import OptionError  # noqa: E402

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
blob = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=12), blob)
row = st.tuples(blob, blob, st.one_of(st.none(), st.lists(header, max_size=4)))


def _batch(rows, string_keys: bool = False) -> pa.RecordBatch:
    keys = [k for k, _, _ in rows]
    if string_keys:
        keys = [None if k is None else k.decode("latin-1") for k in keys]
    return pa.RecordBatch.from_pydict({
        "key": pa.array(keys, pa.string() if string_keys else pa.binary()),
        "value": pa.array([v for _, v, _ in rows], pa.binary()),
        "headers": pa.array(
            [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h in rows],
            HEADERS,
        ),
    })


def _records(rows, picked, marker=None, string_keys: bool = False) -> list[Record]:
    out = []
    for i in picked:
        key, value, hdrs = rows[i]
        if string_keys and key is not None:
            key = key.decode("latin-1").encode()
        headers = tuple(hdrs or ())
        if marker is not None and marker[i] is not None:
            headers += (("chronik.sink", marker[i]),)
        out.append(Record(1_700_000_000_000, key, value, headers))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(row, min_size=1, max_size=40), st.randoms(use_true_random=False),
       st.booleans())
def test_records_section_is_the_builders(rows, rnd, string_keys):
    rb = _batch(rows, string_keys)
    picked = sorted(rnd.sample(range(len(rows)), rnd.randint(1, len(rows))))
    batch = sb.row_batch(rb)
    section = sb.records_section(np.array(picked, np.int64), batch)
    want = encode_records(_records(rows, picked, string_keys=string_keys), 1_700_000_000_000)
    assert bytes(section) == bytes(want)


@settings(max_examples=100, deadline=None)
@given(st.lists(row, min_size=1, max_size=30), st.data())
def test_marker_header_goes_last(rows, data):
    rb = _batch(rows)
    marker = data.draw(st.lists(st.one_of(st.none(), st.binary(max_size=80)),
                                min_size=len(rows), max_size=len(rows)))
    m = sb.Marker(b"chronik.sink", sb.binary(pa.array(marker, pa.binary()), len(rows), "m"))
    batch = sb.row_batch(rb, marker=m)
    picked = list(range(len(rows)))
    section = sb.records_section(np.array(picked, np.int64), batch)
    assert bytes(section) == bytes(
        encode_records(_records(rows, picked, marker), 1_700_000_000_000))


@settings(max_examples=60, deadline=None)
@given(st.lists(row, min_size=1, max_size=30),
       st.sampled_from([codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD]),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_record_batch_is_a_valid_batch(rows, codec, transactional, sequence):
    rb = _batch(rows)
    picked = np.arange(len(rows), dtype=np.int64)
    section = sb.records_section(picked, sb.row_batch(rb))
    data = sb.record_batch(section, len(rows), 1_700_000_000_000, codec, 7, 3, sequence,
                           transactional)
    head = read_header(data)
    body = codecs.decompress(codec, memoryview(data)[61:])
    assert body == bytes(section)
    want = build_batch(_records(rows, range(len(rows))), compression=codecs.NONE,
                       producer_id=7, producer_epoch=3, base_sequence=sequence,
                       partition_leader_epoch=-1, transactional=transactional)
    if codec == codecs.NONE:
        assert data == want
    assert (head.producer_id, head.producer_epoch, head.base_sequence) == (7, 3, sequence)
    assert head.records_count == len(rows) and head.last_offset_delta == len(rows) - 1
    assert head.compression == codec and head.is_transactional == transactional
    from crc32c import crc32c

    assert head.crc == crc32c(memoryview(data)[21:])


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=300_000))
def test_lz4_frame_reads_back(data):
    import lz4.frame

    frame = sb.lz4_frame(np.frombuffer(data, np.uint8))
    assert lz4.frame.decompress(frame) == data
    assert bytes(cramjam.lz4.decompress(frame)) == data


def test_lz4_frame_of_incompressible_blocks():
    data = np.frombuffer(random.Random(1).randbytes(200_000), np.uint8)
    assert bytes(cramjam.lz4.decompress(sb.lz4_frame(data))) == data.tobytes()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=50),
       st.integers(1, 64))
def test_partitioners_are_librdkafkas(keys, count):
    column = sb.binary(pa.array(keys, pa.binary()), len(keys), "key")
    topic_of = np.zeros(len(keys), np.int64)
    counts = np.array([count], np.int64)
    rng = random.Random(5)
    for name, kind in enc.KINDS.items():
        parts = sb.partitions(kind, column, None, topic_of, counts, rng)
        assert ((parts >= 0) & (parts < count)).all()
        for key, part in zip(keys, parts, strict=True):
            crc = zlib.crc32(key or b"") % count
            mm = (murmur2(key or b"") & 0x7FFFFFFF) % count
            if name == "consistent" or (name == "consistent_random" and key):
                assert part == crc
            elif name == "murmur2" or (name == "murmur2_random" and key is not None):
                assert part == mm


def test_null_keys_stick_to_one_partition_per_batch():
    column = sb.binary(pa.array([None] * 100, pa.binary()), 100, "key")
    parts = sb.partitions(enc.CONSISTENT_RANDOM, column, None, np.zeros(100, np.int64),
                          np.array([8], np.int64), random.Random(1))
    assert len(set(parts.tolist())) == 1


def test_partition_column_wins_and_is_checked():
    keys = sb.binary(pa.array([b"a", b"b", None], pa.binary()), 3, "key")
    given = pa.array([2, None, 0], pa.int32())
    parts = sb.partitions(enc.MURMUR2, keys, given, np.zeros(3, np.int64),
                          np.array([4], np.int64), random.Random(1))
    assert parts[0] == 2 and parts[2] == 0
    assert parts[1] == (murmur2(b"b") & 0x7FFFFFFF) % 4
    with pytest.raises(OptionError, match="partition 4"):
        sb.partitions(enc.MURMUR2, keys, pa.array([4, 0, 0], pa.int32()),
                      np.zeros(3, np.int64), np.array([4], np.int64), random.Random(1))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=500), min_size=1, max_size=200), st.integers(1, 3000),
       st.integers(1, 50))
def test_chunks_keep_the_limits_and_every_row(values, limit, records):
    rb = pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})
    batch = sb.row_batch(rb)
    rows = np.arange(len(values), dtype=np.int64)
    parts = sb.chunks(rows, batch, limit, records)
    assert np.concatenate(parts).tolist() == rows.tolist()
    for part in parts:
        assert len(part) <= records
        if len(part) > 1:
            assert len(sb.records_section(part, batch)) <= limit


def test_header_with_a_null_key_is_refused():
    rb = pa.RecordBatch.from_pydict({
        "value": pa.array([b"v"], pa.binary()),
        "headers": pa.array([[{"key": None, "value": b"x"}]], HEADERS),
    })
    with pytest.raises(OptionError, match="null key"):
        sb.row_batch(rb)


def test_value_must_be_string_or_binary():
    rb = pa.RecordBatch.from_pydict({"value": pa.array([1, 2], pa.int64())})
    with pytest.raises(OptionError, match="string or binary"):
        sb.row_batch(rb)


def test_sliced_columns():
    rows = [(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 2 else None) for i in range(20)]
    rb = _batch(rows).slice(5, 10)
    section = sb.records_section(np.arange(10, dtype=np.int64), sb.row_batch(rb))
    assert bytes(section) == bytes(
        encode_records(_records(rows, range(5, 15)), 1_700_000_000_000))
