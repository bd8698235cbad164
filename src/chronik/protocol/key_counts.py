"""KeyCounts (API key 32000), version 0: chronik's own inter-broker request, not a Kafka
API (so not listed in ApiVersions; Kafka's keys stay below 100).

A follower whose log ends below its leader's log start starts over there
(truncate_fully_and_start_at). On a topic with key.versioning.enable the records it
skipped may have been the last of some keys: their numbers stay used (the leader's key
index keeps each key's count), but no fetched record carries them. The follower asks its
leader for the counts of keys with rows below that offset, a page at a time, before it
fetches on (cluster.replica_fetcher). Needs CLUSTER_ACTION on the Cluster, as a follower
Fetch does (the handler: chronik.broker.apis.key_counts).

Bodies after a request header v1 / response header v0 (not flexible), big-endian:
  request:  topic STRING (int16 length) | partition INT32 | below INT64 |
            after BYTES (int32 length, -1: from the first key) | max_keys INT32
  response: error_code INT16 | more INT8 | count INT32 |
            count x (key BYTES (int32 length) | version_count INT64)
"""

from __future__ import annotations

import struct

from chronik.protocol.framing import MalformedRequest

API_KEY = 32000
MAX_KEYS = 10_000
MAX_KEY_BYTES = 1 << 20

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hbi")


class Request:
    __slots__ = ("topic", "partition", "below", "after", "max_keys")

    def __init__(
        self, topic: str, partition: int, below: int, after: bytes | None, max_keys: int
    ) -> None:
        self.topic, self.partition, self.below = topic, partition, below
        self.after, self.max_keys = after, max_keys


def encode_request(request: Request) -> bytes:
    topic = request.topic.encode()
    out = _I16.pack(len(topic)) + topic
    out += _I32.pack(request.partition) + _I64.pack(request.below)
    if request.after is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(request.after)) + request.after
    return out + _I32.pack(request.max_keys)


def decode_request(body: bytes) -> Request:
    try:
        (n,) = _I16.unpack_from(body, 0)
        if not 0 < n <= 249 or 2 + n > len(body):
            raise MalformedRequest(f"KeyCounts: bad topic length {n}")
        topic = body[2 : 2 + n].decode("utf-8")
        at = 2 + n
        (partition,) = _I32.unpack_from(body, at)
        (below,) = _I64.unpack_from(body, at + 4)
        (size,) = _I32.unpack_from(body, at + 12)
        at += 16
        after = None
        if size >= 0:
            if size > MAX_KEY_BYTES or at + size > len(body):
                raise MalformedRequest(f"KeyCounts: bad key length {size}")
            after = body[at : at + size]
            at += size
        elif size != -1:
            raise MalformedRequest(f"KeyCounts: bad key length {size}")
        (max_keys,) = _I32.unpack_from(body, at)
        if at + 4 != len(body):
            raise MalformedRequest("KeyCounts: trailing bytes")
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"KeyCounts: {exc}") from None
    return Request(topic, partition, below, after, max_keys)


def encode_response(code: int, counts: list[tuple[bytes, int]], more: bool) -> list[bytes]:
    parts = [_HEAD.pack(code, int(more), len(counts))]
    for key, count in counts:
        parts += (_I32.pack(len(key)), key, _I64.pack(count))
    return parts


def decode_response(body: bytes) -> tuple[int, list[tuple[bytes, int]], bool]:
    """(error code, counts, more); ValueError if the body is not one."""
    try:
        code, more, n = _HEAD.unpack_from(body, 0)
        at = _HEAD.size
        counts = []
        for _ in range(n):
            (size,) = _I32.unpack_from(body, at)
            at += 4
            if not 0 <= size <= len(body) - at:
                raise ValueError(f"bad key length {size}")
            key = body[at : at + size]
            (count,) = _I64.unpack_from(body, at + size)
            at += size + 8
            counts.append((key, count))
    except struct.error as exc:
        raise ValueError(str(exc)) from None
    return code, counts, bool(more)


