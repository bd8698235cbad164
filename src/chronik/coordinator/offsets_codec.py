# Records of the internal topic __consumer_offsets, encoded like Kafka's so that
# Kafka tools can read our log. Every key and value opens with an int16 schema
# version; strings are int16 length + UTF-8 (length -1 = null), bytes are int32
# length + data, arrays are int32 count + items; all big-endian.
#
#   OffsetCommitKey   (version 1): group string, topic string, partition int32
#   OffsetCommitValue (version 3): offset int64, leaderEpoch int32, metadata string,
#                                  commitTimestamp int64
#   GroupMetadataKey  (version 2): group string
#   GroupMetadataValue(version 3): protocolType string, generation int32,
#       protocol string?, leader string?, currentStateTimestamp int64,
#       members [memberId string, groupInstanceId string?, clientId string,
#                clientHost string, rebalanceTimeout int32, sessionTimeout int32,
#                subscription bytes, assignment bytes]
#
# A record with a null value is a tombstone: the offset or the group is deleted.
# Decoding also accepts the older value versions Kafka wrote (offset v0-v3,
# group v0-v3), since they differ only by the fields listed in Kafka's schemas.
from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


class CodecError(ValueError):
    """A key or value in __consumer_offsets that this codec cannot read."""


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        raw = v.encode()
        self.i16(len(raw))
        self.parts.append(raw)

    def bytes_(self, v: bytes) -> None:
        self.i32(len(v))
        self.parts.append(bytes(v))

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise CodecError("truncated record")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def _raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CodecError("truncated record")
        v = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return v

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self._raw(n).decode()
        except UnicodeDecodeError as e:
            raise CodecError("string is not UTF-8") from e

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise CodecError("null where a string is required")
        return v

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n == -1 else self._raw(n)


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    w = _Writer()
    if isinstance(key, OffsetKey):
        w.i16(OFFSET_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.i32(key.partition)
    else:
        w.i16(GROUP_KEY_VERSION)
        w.string(key.group)
    return w.done()


def decode_key(buf: bytes) -> OffsetKey | GroupKey:
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    raise CodecError(f"unknown key version {version}")


def encode_offset_value(v: OffsetValue) -> bytes:
    w = _Writer()
    w.i16(OFFSET_VALUE_VERSION)
    w.i64(v.offset)
    w.i32(v.leader_epoch)
    w.string(v.metadata)
    w.i64(v.commit_timestamp)
    return w.done()


def decode_offset_value(buf: bytes) -> OffsetValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 3:
        raise CodecError(f"unknown offset value version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    if version == 1:
        r.i64()  # expireTimestamp, dropped by Kafka since version 2
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def encode_group_value(v: GroupValue) -> bytes:
    w = _Writer()
    w.i16(GROUP_VALUE_VERSION)
    w.string(v.protocol_type)
    w.i32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    w.i64(v.current_state_timestamp)
    w.i32(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


def decode_group_value(buf: bytes) -> GroupValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 3:
        raise CodecError(f"unknown group value version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0 or count > len(buf):
        raise CodecError("bad member count")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout_first = r.i32()
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout_first, r.i32()
        else:
            rebalance_timeout = session_timeout = session_timeout_first
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % n; Utils.abs maps MIN_VALUE to 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
