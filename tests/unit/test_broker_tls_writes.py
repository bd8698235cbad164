"""How a response is cut into writes for a TLS connection (connection.tls_pieces)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chronik.broker.connection import TLS_CHUNK, TLS_RECORD, tls_pieces

PART_SIZES = st.one_of(
    st.integers(0, 64), st.integers(TLS_RECORD - 2, TLS_RECORD + 2), st.integers(0, 3 * TLS_CHUNK)
)


def parts_of(sizes: list[int]) -> list[bytes]:
    return [bytes([i % 251]) * size for i, size in enumerate(sizes)]


@given(st.lists(PART_SIZES, max_size=12))
def test_pieces_carry_the_parts_in_order(sizes: list[int]) -> None:
    parts = parts_of(sizes)
    assert b"".join(bytes(p) for p in tls_pieces(parts)) == b"".join(parts)


@given(st.lists(PART_SIZES, max_size=12))
def test_pieces_are_bounded_and_whole_records(sizes: list[int]) -> None:
    pieces = [len(p) for p in tls_pieces(parts_of(sizes))]
    assert all(size > 0 for size in pieces)
    # A piece of small parts may pass TLS_CHUNK by less than one record.
    assert all(size < TLS_CHUNK + TLS_RECORD for size in pieces)
    # Only the last piece ends in a part-filled record, unless small parts alone made one.
    for size in pieces[:-1]:
        assert size % TLS_RECORD == 0 or size >= TLS_CHUNK


def test_large_parts_are_not_copied() -> None:
    big = b"x" * (4 * TLS_CHUNK)
    pieces = list(tls_pieces([b"head", big, b"tail"]))
    views = [p for p in pieces if isinstance(p, memoryview)]
    assert sum(len(v) for v in views) >= len(big) - 2 * TLS_RECORD
    assert all(v.obj is big for v in views)


def test_a_header_and_small_parts_make_one_record() -> None:
    pieces = list(tls_pieces([b"\x00\x00\x00\x10", b"h" * 8, b"b" * 100]))
    assert [len(p) for p in pieces] == [112]
