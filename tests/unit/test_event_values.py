"""Confluent's framing of a value and of Protobuf message indexes (chronik.schemas.framing)
and the JSON form the event
store's API gives decoded values (chronik.http.event_schemas.json_value)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid

import pytest

from chronik.http.event_schemas import json_value
from chronik.schemas.framing import (
    FramingError,
    frame,
    message_indexes,
    read_message_indexes,
    unframe,
)


def test_frame_is_magic_byte_id_big_endian_then_payload() -> None:
    framed = frame(258, b"body")
    assert framed == b"\x00\x00\x00\x01\x02body"
    assert unframe(framed) == (258, b"body")
    assert unframe(frame(7, b"")) == (7, b"")


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x", b"plain text", b"\x00\xff\xff\xff\xffx"],
)
def test_values_that_are_not_framed(value: bytes) -> None:
    assert unframe(value) is None


def test_json_value_gives_only_json_types() -> None:
    decoded = {
        "raw": b"\x00\xff",
        "at": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC),
        "day": datetime.date(2022, 1, 8),
        "id": uuid.UUID("6c6b2a2e-51a5-4bd6-8a3e-1b7b1f6f3b9c"),
        "price": decimal.Decimal("12.50"),
        "floats": [1.5, float("nan"), float("inf"), float("-inf")],
        "nested": ({"ok": True, "none": None},),
    }
    out = json_value(decoded)
    assert out == {
        "raw": "\u0000\u00ff",
        "at": "2023-11-14T22:13:20+00:00",
        "day": "2022-01-08",
        "id": "6c6b2a2e-51a5-4bd6-8a3e-1b7b1f6f3b9c",
        "price": "12.50",
        "floats": [1.5, "NaN", "Infinity", "-Infinity"],
        "nested": [{"ok": True, "none": None}],
    }
    # Strict JSON: no NaN tokens, nothing json cannot write.
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize(
    ("indexes", "encoded"),
    [
        ([0], b"\x00"),
        ([1], b"\x02\x02"),
        ([0, 0], b"\x04\x00\x00"),
        ([2, 70], b"\x04\x04\x8c\x01"),
    ],
)
def test_message_indexes_as_confluents_serializers_write_them(
    indexes: list[int], encoded: bytes
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    written = io.BytesIO()
    ProtobufSerializer._encode_varints(written, indexes, zigzag=True)
    assert written.getvalue() == encoded
    assert message_indexes(indexes) == encoded
    assert read_message_indexes(encoded + b"msg") == (indexes, b"msg")


@pytest.mark.parametrize("payload", [b"", b"\x04\x02", b"\x02\x01", b"\xff" * 11, b"\xc8\x01"])
def test_bad_message_indexes(payload: bytes) -> None:
    with pytest.raises(FramingError):
        read_message_indexes(payload)
