"""Row identities of the exactly-once sink do not depend on row order, only on content."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

from chronik.spark.sink_log import row_identity  # noqa: E402


def test_identity_is_content_only() -> None:
    a = row_identity("t", None, b"k", b"v", [("h", b"1")])
    assert a == row_identity("t", None, b"k", b"v", [("h", b"1")])
    assert a != row_identity("t", 0, b"k", b"v", [("h", b"1")])
    assert a != row_identity("t", None, b"k", b"v2", [("h", b"1")])
    assert a != row_identity("t", None, b"k", b"v", [("h", None)])


def test_null_and_empty_differ() -> None:
    assert row_identity("t", None, None, b"v", []) != row_identity("t", None, b"", b"v", [])
    assert row_identity("t", None, b"ab", b"c", []) != row_identity("t", None, b"a", b"bc", [])
