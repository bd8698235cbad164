# Metadata response body, hand-encoded (versions 0-12): with thousands of partitions,
# building a kio entity per partition and serialising them cost tens of milliseconds of
# the event loop per request. Each topic's entry is encoded on its own, so that the
# handler can keep it until the topic changes:
#
#   [v3+] throttle_time_ms int32
#   brokers: array of
#     node_id int32, host string, port int32, [v1+] rack nullable string
#     [flexible] tagged fields
#   [v2+] cluster_id nullable string
#   [v1+] controller_id int32
#   topics: array of (one topic entry, below, each)
#   [v8-10] cluster_authorized_operations int32
#   [flexible] tagged fields
#
#   topic entry:
#     error_code int16
#     name string ([v12+] nullable: null for a topic asked for by an id it lacks)
#     [v10+] topic_id uuid (16 bytes, zero when unknown)
#     [v1+] is_internal bool
#     partitions: array of
#       error_code int16, partition_index int32, leader_id int32,
#       [v7+] leader_epoch int32,
#       replica_nodes array of int32, isr_nodes array of int32,
#       [v5+] offline_replicas array of int32
#       [flexible] tagged fields
#     [v8+] topic_authorized_operations int32
#     [flexible] tagged fields
#
# Versions 9+ are flexible: arrays and strings carry uvarint lengths + 1, a null
# string is uvarint 0, and each struct ends with its tagged-field section (always empty
# here). Non-flexible arrays and strings carry int32 and int16 lengths, a null string
# int16 -1.
from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from functools import lru_cache

from chronik.protocol.framing import write_uvarint

FLEXIBLE_FROM = 9

# (error_code, partition_index, leader_id, leader_epoch, replica_nodes, isr_nodes,
#  offline_replicas)
PartitionEntry = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]
# (node_id, host, port, rack)
BrokerEntry = tuple[int, str, int, str | None]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HII = struct.Struct(">hii")
_HIII = struct.Struct(">hiii")
_BROKER_HEAD = struct.Struct(">i")
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
_ZERO_UUID = bytes(16)
_EMPTY_ARRAY_FLEXIBLE = b"\x01"
_EMPTY_ARRAY = b"\x00\x00\x00\x00"


def encode_topic(
    version: int,
    error_code: int,
    name: str | None,
    topic_id: uuid.UUID | None,
    is_internal: bool,
    partitions: Iterable[PartitionEntry],
    authorized_operations: int,
) -> bytes:
    """One topic's entry of the topics array, as it goes on the wire."""
    flexible = version >= FLEXIBLE_FROM
    out = [_I16.pack(error_code)]
    if name is None:
        if version < 12:
            raise ValueError(f"Metadata v{version} cannot carry a null topic name")
        out.append(b"\x00")
    else:
        out.append(_string(name, flexible))
    if version >= 10:
        out.append(topic_id.bytes if topic_id is not None else _ZERO_UUID)
    if version >= 1:
        out.append(b"\x01" if is_internal else b"\x00")
    items = list(partitions)
    out.append(_array_len(len(items), flexible))
    with_epoch = version >= 7
    with_offline = version >= 5
    for code, index, leader, epoch, replicas, isr, offline in items:
        if with_epoch:
            out.append(_HIII.pack(code, index, leader, epoch))
        else:
            out.append(_HII.pack(code, index, leader))
        out.append(_int32s(replicas, flexible))
        out.append(_int32s(isr, flexible))
        if with_offline:
            out.append(_int32s(offline, flexible))
        if flexible:
            out.append(b"\x00")
    if version >= 8:
        out.append(_I32.pack(authorized_operations))
    if flexible:
        out.append(b"\x00")
    return b"".join(out)


def encode_metadata_response(
    version: int,
    brokers: Sequence[BrokerEntry],
    cluster_id: str | None,
    controller_id: int,
    topics: Sequence[bytes],
    cluster_authorized_operations: int,
    throttle_ms: int = 0,
) -> list[bytes]:
    """The response body: its head, the topic entries as given (encode_topic's, not
    copied), and its tail."""
    flexible = version >= FLEXIBLE_FROM
    head: list[bytes] = []
    if version >= 3:
        head.append(_I32.pack(throttle_ms))
    head.append(_array_len(len(brokers), flexible))
    for node_id, host, port, rack in brokers:
        head.append(_BROKER_HEAD.pack(node_id))
        head.append(_string(host, flexible))
        head.append(_I32.pack(port))
        if version >= 1:
            head.append(_nullable_string(rack, flexible))
        if flexible:
            head.append(b"\x00")
    if version >= 2:
        head.append(_nullable_string(cluster_id, flexible))
    if version >= 1:
        head.append(_I32.pack(controller_id))
    head.append(_array_len(len(topics), flexible))
    tail: list[bytes] = []
    if 8 <= version <= 10:
        tail.append(_I32.pack(cluster_authorized_operations))
    if flexible:
        tail.append(b"\x00")
    return [b"".join(head), *topics, b"".join(tail)]


def _int32s(values: Sequence[int], flexible: bool) -> bytes:
    n = len(values)
    if n == 0:
        return _EMPTY_ARRAY_FLEXIBLE if flexible else _EMPTY_ARRAY
    if flexible:
        return _uvarint(n + 1) + _int32_array(n).pack(*values)
    return _int32_array_counted(n).pack(n, *values)


@lru_cache(maxsize=64)
def _int32_array(n: int) -> struct.Struct:
    return struct.Struct(f">{n}i")


@lru_cache(maxsize=64)
def _int32_array_counted(n: int) -> struct.Struct:
    return struct.Struct(f">i{n}i")


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(value, flexible)


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _uvarint(n: int) -> bytes:
    return _ONE_BYTE[n] if n < 0x80 else write_uvarint(n)
