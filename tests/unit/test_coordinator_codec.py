import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.coordinator.offsets_codec import (
    CodecError,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)

names = st.text(max_size=40)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@given(names, names, i32)
def test_offset_key_round_trip(group, topic, partition):
    key = OffsetKey(group, topic, partition)
    raw = encode_key(key)
    assert raw[:2] == b"\x00\x01"
    assert decode_key(raw) == key


@given(names)
def test_group_key_round_trip(group):
    raw = encode_key(GroupKey(group))
    assert raw[:2] == b"\x00\x02"
    assert decode_key(raw) == GroupKey(group)


@given(i64, i32, names, i64)
def test_offset_value_round_trip(offset, epoch, metadata, ts):
    v = OffsetValue(offset, epoch, metadata, ts)
    raw = encode_offset_value(v)
    assert raw[:2] == b"\x00\x03"
    assert decode_offset_value(raw) == v


members = st.builds(
    MemberValue,
    names,
    st.none() | names,
    names,
    names,
    i32,
    i32,
    st.binary(max_size=50),
    st.binary(max_size=50),
)


@given(names, i32, st.none() | names, st.none() | names, i64, st.lists(members, max_size=4))
def test_group_value_round_trip(ptype, gen, protocol, leader, ts, ms):
    v = GroupValue(ptype, gen, protocol, leader, ts, tuple(ms))
    assert decode_group_value(encode_group_value(v)) == v


def test_offset_value_matches_kafka_layout():
    # Bytes as Kafka's OffsetCommitValue v3 serializer lays them out.
    raw = struct.pack(">hqih2sq", 3, 42, 7, 2, b"md", 1700000000000)
    assert encode_offset_value(OffsetValue(42, 7, "md", 1700000000000)) == raw


def test_older_offset_value_versions_decode():
    v1 = struct.pack(">hqh1sqq", 1, 5, 1, b"x", 10, 99)
    assert decode_offset_value(v1) == OffsetValue(5, -1, "x", 10)
    v0 = struct.pack(">hqh0sq", 0, 6, 0, b"", 11)
    assert decode_offset_value(v0) == OffsetValue(6, -1, "", 11)


@given(st.binary(max_size=60))
def test_garbage_never_crashes_with_other_than_codec_error(raw):
    for decode in (decode_key, decode_offset_value, decode_group_value):
        with contextlib.suppress(CodecError):
            decode(raw)


def test_truncated_value_is_codec_error():
    raw = encode_offset_value(OffsetValue(1, 2, "meta", 3))
    with pytest.raises(CodecError):
        decode_offset_value(raw[:-3])


@pytest.mark.parametrize(
    ("s", "h"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 1772899),
    ],
)
def test_java_string_hash(s, h):
    assert java_string_hash(s) == h


def test_partition_for_matches_kafka():
    # Kafka: Utils.abs(groupId.hashCode()) % 50, with abs(MIN_VALUE) == 0.
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0
    h = java_string_hash("test-consumer-group")
    assert partition_for("test-consumer-group", 50) == abs(h) % 50
