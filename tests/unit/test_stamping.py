"""chronik.records.stamping, the per-record loop of versioned produce, runs compiled by
mypyc where the package was built with it: the compiled module must answer exactly as
its source does, for well-formed batches and for any bytes a client can send; the key
index's multi-row inserts must store every row whatever the batch size."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.records import stamping, versions
from chronik.records.batch import HEADER_SIZE
from chronik.records.builder import Record, build_batch
from chronik.records.versions import EXPECTED_HEADER, VERSION_HEADER
from chronik.storage.key_index import KeyIndex

SOURCE = versions.stamping_source()

keys = st.one_of(st.none(), st.sampled_from([b"a", b"b", b"\xff\x00", b"k" * 300]))
expected = st.one_of(
    st.none(), st.integers(0, 3).map(lambda n: str(n).encode()),
    st.sampled_from([b"", b"x", b"-1", b"007", b"9" * 19]),
)
headers = st.lists(
    st.tuples(
        st.sampled_from(["h", VERSION_HEADER, "x" * 70]),
        st.one_of(st.none(), st.binary(max_size=4)),
    ),
    max_size=3,
)
records = st.lists(
    st.tuples(keys, st.one_of(st.none(), st.binary(max_size=200)), headers, expected),
    min_size=1, max_size=40,
)


def body_of(recs) -> tuple[bytes, int]:
    built = [
        Record(1000 + i, key, value,
               tuple(hs) + (((EXPECTED_HEADER, exp),) if exp is not None else ()))
        for i, (key, value, hs, exp) in enumerate(recs)
    ]
    return build_batch(built)[HEADER_SIZE:], len(built)


def outcome(module, body: bytes, count: int):
    known = {b"a": 1, b"k" * 300: 1500}
    try:
        parts, flat, failures, counts = module.stamp_records(body, count, lambda k: known.get(k, 0))
    except Exception as exc:  # the type and message are what is compared
        return type(exc).__name__, str(exc)
    return b"".join(parts), flat, failures, counts


def test_the_compiled_module_is_the_one_in_use_where_it_was_built():
    if not versions.is_compiled(stamping):
        if os.environ.get("CI"):
            pytest.fail("chronik.records.stamping is not compiled: setup.py did not build it")
        pytest.skip("chronik.records.stamping runs interpreted here (no mypyc build)")
    assert versions.stamp_records is stamping.stamp_records
    assert not versions.is_compiled(SOURCE)


@settings(max_examples=300, deadline=None)
@given(records)
def test_compiled_and_source_stamp_alike(recs):
    body, count = body_of(recs)
    assert outcome(stamping, body, count) == outcome(SOURCE, body, count)


@settings(max_examples=500, deadline=None)
@given(records, st.data())
def test_compiled_and_source_refuse_damaged_records_alike(recs, data):
    body, count = body_of(recs)
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        if not damaged:
            break
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    damaged = bytes(damaged[:cut])
    extra = data.draw(st.integers(0, 3))
    assert outcome(stamping, damaged, count + extra) == outcome(SOURCE, damaged, count + extra)


@pytest.mark.parametrize("n", [0, 1, 99, 100, 101, 250, 1000])
def test_the_index_stores_every_row_of_a_batch_of_any_size(tmp_path, n):
    index = KeyIndex.create(tmp_path)
    flat: list[bytes | int] = []
    for i in range(n):
        flat += (b"k%d" % (i % 7), i // 7, i)
    counts = {b"k%d" % k: len(range(k, n, 7)) for k in range(min(n, 7))}
    index.record_batch(flat, 50, n + 50, counts)
    assert index.rows() == [(b"k%d" % (i % 7), i // 7, 50 + i) for i in range(n)]
    assert index.end == n + 50
    for key, c in counts.items():
        assert index.version_count(key) == c


def test_a_version_indexed_twice_keeps_the_newer_row(tmp_path):
    index = KeyIndex.create(tmp_path)
    index.record_batch([b"a", 0, 5, b"a", 1, 6], 0, 7, {b"a": 2})
    index.record_batch([b"a", 1, 9], 0, 10, {b"a": 2})  # a log holding version 1 twice
    assert index.rows() == [(b"a", 0, 5), (b"a", 1, 9)]
    assert index.version_count(b"a") == 2
