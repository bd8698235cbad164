"""The request length guard against kio's own encoder and decoder.

Requests of every API version the broker serves are drawn with hypothesis from
kio's entity classes and encoded with kio's writer.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from chronik.broker.apis import HANDLERS
from chronik.protocol import compat, guard
from chronik.protocol.framing import MalformedRequest, read_uvarint, write_uvarint

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

CLASSES = [
    compat.request_class(key, version)
    for key, module in sorted(HANDLERS.items())
    if not getattr(module, "RAW", False)  # chronik's own APIs: no kio schema
    for version in range(module.VERSIONS[0], module.VERSIONS[1] + 1)
]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def encode(request: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(request))(out, request)
    return out.getvalue()


requests = st.sampled_from(CLASSES).flatmap(st.from_type)


def walk(cls: type, buf: bytes) -> int:
    """Where the guard's walk ends, or MalformedRequest."""
    guard.check(cls, buf, 0)
    return guard.walker(cls)(buf, 0, len(buf))


def test_every_served_request_class_has_a_walker() -> None:
    for cls in CLASSES:
        assert callable(guard.walker(cls)), cls


@SETTINGS
@given(requests)
def test_valid_request_passes_and_ends_where_kio_ends(request: Any) -> None:
    cls = type(request)
    buf = encode(request)
    end = walk(cls, buf)
    _, kio_end = compat.decode(cls, buf, 0)
    assert end == kio_end == len(buf)


@SETTINGS
@given(requests, st.data())
def test_truncated_request_fails_the_guard_or_decodes(request: Any, data: st.DataObject) -> None:
    cls = type(request)
    buf = encode(request)
    assume(len(buf) > 0)
    cut = data.draw(st.integers(0, len(buf) - 1))
    short = buf[:cut]
    try:
        end = walk(cls, short)
    except MalformedRequest:
        return
    assert compat.decode(cls, short, 0)[1] == end


def _first_length(cls: type) -> tuple[int, guard._Shape] | None:
    """Offset of the first length prefix in a body of `cls`, when only fixed fields
    come before it."""
    offset = 0
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        shape = guard._shape(field)
        if not shape.array and shape.kind in guard.FIXED:
            offset += guard.FIXED[shape.kind]
            continue
        if shape.kind == "struct" and not shape.array:
            return None
        return offset, shape
    return None


PREFIXED = [cls for cls in CLASSES if _first_length(cls) is not None]


@SETTINGS
@given(st.sampled_from(PREFIXED).flatmap(st.from_type), st.data())
def test_a_length_beyond_the_frame_always_fails(request: Any, data: st.DataObject) -> None:
    cls = type(request)
    buf = encode(request)
    found = _first_length(cls)
    assert found is not None
    offset, shape = found
    if cls.__flexible__:
        _, after = read_uvarint(buf, offset)
        huge = data.draw(st.integers(len(buf) + 1, 2**35 - 2))
        lie = write_uvarint(huge + 1)
    elif shape.kind == "string" and not shape.array:
        after = offset + 2
        lie = struct.pack(">h", data.draw(st.integers(len(buf) + 1, 2**15 - 1)))
    else:
        after = offset + 4
        lie = struct.pack(">i", data.draw(st.integers(len(buf) + 1, 2**31 - 1)))
    with pytest.raises(MalformedRequest, match="cannot fit|past the end"):
        walk(cls, buf[:offset] + lie + buf[after:])


HUGE_LENGTHS = [write_uvarint(0x7FFFFFFF0), struct.pack(">i", 0x7FFFFFFF)]


@SETTINGS
@given(requests, st.data())
def test_huge_length_anywhere_is_refused_or_read_alike_by_kio(
    request: Any, data: st.DataObject
) -> None:
    # Whatever the guard lets through, kio reads the same way, so kio never sees a
    # count the guard has not bounded.
    cls = type(request)
    buf = encode(request)
    at = data.draw(st.integers(0, len(buf)))
    lie = data.draw(st.sampled_from(HUGE_LENGTHS))
    mutated = buf[:at] + lie + buf[at + data.draw(st.integers(0, len(lie))) :]
    try:
        end = walk(cls, mutated)
    except MalformedRequest:
        return
    try:
        _, kio_end = compat.decode(cls, mutated, 0)
    except Exception:  # noqa: BLE001 - kio refusing bad bytes is fine; only its reading matters
        return
    assert kio_end == end


def test_null_in_a_non_nullable_array_is_refused() -> None:
    cls = compat.request_class(0, 9)  # Produce v9: topic_data may not be null
    body = b"\x00" + struct.pack(">hi", 1, 1000) + b"\x00" + b"\x00"
    with pytest.raises(MalformedRequest, match="ProduceRequest.topic_data"):
        guard.check(cls, body, 0)


def test_known_tagged_field_must_fill_its_declared_size() -> None:
    cls = compat.request_class(1, 15)  # Fetch v15: tag 0 is the nullable cluster id
    head = struct.pack(">iiibii", 500, 1, 1000, 0, 0, -1) + b"\x01\x01\x01"
    guard.check(cls, head + b"\x01\x00\x02\x02a", 0)
    with pytest.raises(MalformedRequest, match="does not match"):
        guard.check(cls, head + b"\x01\x00\x05\x02a" + bytes(3), 0)
