"""Confluent's wire header as schema validation reads it (chronik.schemas.framing), the
subject name strategies (chronik.schemas.subject_names) and the walk that reads the head
of every record's key or value (chronik.records.heads), checked against confluent-kafka's
own encoder and decoder and against the full record reader."""

from __future__ import annotations

import io
import json
import os

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from hypothesis import given
from hypothesis import strategies as st

from chronik.records import compiled, heads
from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from chronik.records.reader import iter_records
from chronik.schemas import framing, subject_names

indexes_lists = st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=1, max_size=8)


def header(schema_id: int, indexes: list[int] | None = None) -> bytes:
    return framing.frame(schema_id, b"" if indexes is None else framing.message_indexes(indexes))


@given(indexes_lists, st.integers(min_value=1, max_value=2**31 - 1), st.binary(max_size=20))
def test_message_indexes_read_what_confluent_kafka_writes(indexes, schema_id, payload):
    framed = SchemaId("PROTOBUF", schema_id, message_indexes=indexes).id_to_bytes() + payload
    unframed = framing.unframe(framed)
    assert unframed is not None and unframed[0] == schema_id
    got, message = framing.read_message_indexes(unframed[1])
    assert (got, message) == (indexes, payload)
    # And confluent-kafka reads what chronik writes.
    ours = header(schema_id, indexes) + payload
    assert ours == framed
    reader = SchemaId("PROTOBUF")
    rest = reader.from_bytes(io.BytesIO(ours))
    assert (reader.id, reader.message_indexes, rest.read()) == (schema_id, indexes, payload)


def test_a_single_zero_byte_stands_for_the_first_message():
    assert framing.message_indexes([0]) == b"\x00"
    assert framing.read_message_indexes(b"\x00\x99") == ([0], b"\x99")
    # A count of one with index 0 means the same and is read as such.
    assert framing.read_message_indexes(b"\x02\x00") == ([0], b"")
    assert framing.read_message_indexes(b"\x04\x02\x00") == ([1, 0], b"")


@pytest.mark.parametrize(
    "data",
    [
        b"",  # nothing after the id
        b"\x80",  # a varint cut short
        b"\x01\x02",  # a negative count
        b"\x04\x02",  # two indexes announced, one there
        b"\x02\x01",  # a negative index
        b"\xca\x01" + b"\x00" * 200,  # a count of 101: over the limit
        b"\xff" * 11,  # a varint longer than ten bytes
    ],
)
def test_malformed_message_indexes_are_refused(data):
    with pytest.raises(framing.FramingError):
        framing.read_message_indexes(data)


@given(st.binary(max_size=8))
def test_a_framed_value_needs_the_magic_byte_and_four_bytes(data):
    schema_id = int.from_bytes(data[1:5], "big", signed=True)
    framed = len(data) >= 5 and data[0] == 0 and schema_id >= 0
    assert framing.unframe(data) == ((schema_id, data[5:]) if framed else None)


def test_subject_name_strategies():
    assert subject_names.strategy_name(subject_names.DEFAULT_STRATEGY) == "TopicNameStrategy"
    assert subject_names.strategy_name("RecordNameStrategy") == "RecordNameStrategy"
    assert subject_names.strategy_name("com.example.RecordNameStrategy") is None
    assert subject_names.strategy_name("topicnamestrategy") is None
    assert subject_names.subject("TopicNameStrategy", "t", True) == "t-key"
    assert subject_names.subject("TopicNameStrategy", "t", False) == "t-value"
    assert subject_names.subject("RecordNameStrategy", "t", False, "a.B") == "a.B"
    assert subject_names.subject("TopicRecordNameStrategy", "t", True, "a.B") == "t-a.B"


@pytest.mark.parametrize(
    ("schema_type", "schema", "name"),
    [
        (
            "AVRO",
            {"type": "record", "name": "User", "namespace": "com.acme", "fields": []},
            "com.acme.User",
        ),
        (
            "AVRO",
            {"type": "record", "name": "a.b.User", "namespace": "x.y", "fields": []},
            "a.b.User",
        ),
        ("AVRO", {"type": "enum", "name": "Suit", "symbols": ["A"]}, "Suit"),
        ("AVRO", "com.acme.User", "com.acme.User"),
        ("AVRO", "string", "string"),
        ("AVRO", {"type": "array", "items": "int"}, None),
        ("AVRO", ["null", "int"], None),
        ("JSON", {"title": "Order", "type": "object"}, "Order"),
        ("JSON", {"type": "object"}, None),
        ("JSON", True, None),
    ],
)
def test_record_names_of_avro_and_json_schemas(schema_type, schema, name):
    assert subject_names.record_name(schema_type, json.dumps(schema)) == name


# The compiled walk (when the package was built with mypyc) and its source, which must agree.
WALKS = [pytest.param(compiled.source_of(heads), id="source")]
if compiled.is_compiled(heads):
    WALKS.append(pytest.param(heads, id="compiled"))

fields = st.none() | st.binary(max_size=300)
records = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2**40),
        fields,
        fields,
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1,
    max_size=40,
)


def head_code(field: bytes | None) -> int:
    if field is None:
        return heads.HEAD_NULL
    if len(field) < 5:
        return heads.HEAD_SHORT
    return int.from_bytes(field[:5], "big")


def expand(runs: list[int], count: int) -> list[int]:
    out: list[int] = []
    for i in range(0, len(runs), 2):
        stop = runs[i + 2] if i + 2 < len(runs) else count
        out.extend([runs[i + 1]] * (stop - runs[i]))
    return out


@pytest.mark.parametrize("walk", WALKS)
@given(recs=records, codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]))
def test_head_runs_and_fields_match_the_full_record_reader(walk, recs, codec):
    batch = build_batch(
        [Record(ts, key, value, tuple(headers)) for ts, key, value, headers in recs],
        compression=codec,
    )
    header = read_header(batch)
    section = walk.records_section(batch, header.size, header.compression)
    decoded = list(iter_records(batch))
    count = header.records_count
    for key in (True, False):
        expected = [r.key if key else r.value for r in decoded]
        runs = walk.head_runs(*section, count, key)
        assert expand(runs, count) == [head_code(f) for f in expected]
        # Runs are maximal: no two neighbours share a head.
        assert all(runs[i + 1] != runs[i + 3] for i in range(0, len(runs) - 2, 2))
        assert walk.fields(*section, count, key) == expected


@pytest.mark.parametrize("walk", WALKS)
@given(
    values=st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=10),
    codec=st.sampled_from([NONE, LZ4]),
    data=st.data(),
)
def test_a_cut_section_is_malformed_never_misread(walk, values, codec, data):
    batch = build_batch([Record(1, None, v) for v in values], compression=codec)
    header = read_header(batch)
    buf, start, end = walk.records_section(batch, header.size, header.compression)
    end = len(buf) if end < 0 else end
    cut = data.draw(st.integers(min_value=start, max_value=end - 1))
    for call in (walk.head_runs, walk.fields):
        # The section cut short, in a buffer that ends there and in one that goes on.
        for section in ((buf[:cut], start, -1), (buf, start, cut)):
            with pytest.raises((ValueError, IndexError)):
                call(*section, header.records_count, False)
        # One more record than the section holds.
        with pytest.raises((ValueError, IndexError)):
            call(buf, start, end, header.records_count + 1, False)
        assert len(call(buf, start, end, header.records_count, False)) >= 1


def test_the_compiled_walk_is_the_one_in_use_where_it_was_built():
    if not compiled.is_compiled(heads):
        if os.environ.get("CI"):
            pytest.fail("chronik.records.heads is not compiled: setup.py did not build it")
        pytest.skip("chronik.records.heads runs interpreted here (no mypyc build)")
    assert compiled.current(heads) is heads
    assert not compiled.is_compiled(compiled.source_of(heads))
