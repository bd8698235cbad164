# Fetch v11 (the newest non-flexible version) encoded and read by hand, for the two
# clients of the project that fetch records to append or decode them as bytes: a
# follower (one request per fetch round, where kio entities, and copying each
# partition's record bytes out of the frame, were a fixed cost of every round) and the
# Spark reader's fast path (chronik.spark.fetch_client).
#
#   request body (Fetch v11, not flexible):
#     replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32,
#     isolation_level int8, session_id int32, session_epoch int32,
#     topics: array (int32 count) of
#       topic string (int16 length), partitions: array of
#         partition int32, current_leader_epoch int32, fetch_offset int64,
#         log_start_offset int64, partition_max_bytes int32
#     forgotten_topics_data: array of
#       topic string, partitions: array of int32
#     rack_id string
#
#   response body (Fetch v11):
#     throttle_time_ms int32, error_code int16, session_id int32,
#     responses: array of
#       topic string, partitions: array of
#         partition_index int32, error_code int16, high_watermark int64,
#         last_stable_offset int64, log_start_offset int64,
#         aborted_transactions nullable array (int32 count, -1 null) of
#           (producer_id int64, first_offset int64),
#         preferred_read_replica int32, records nullable bytes (int32 length, -1 null)
#
# Record bytes come back as views of the response frame, not copies: the follower
# appends them as they are (its log checks each batch's header and CRC once).
from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

VERSION = 11

_HEAD = struct.Struct(">iiiibii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iiqqi")
_RESPONSE_HEAD = struct.Struct(">ihi")
_RESULT = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_ABORTED_SIZE = _ABORTED.size


class FetchPosition(NamedTuple):
    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int


class PartitionData(NamedTuple):
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: memoryview | None
    last_stable_offset: int = -1
    # (producer_id, first_offset) of each aborted transaction in the range (read_committed).
    aborted: list[tuple[int, int]] | None = None


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def encode_request(
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    session_id: int,
    session_epoch: int,
    partitions: Mapping[tuple[str, int], FetchPosition],
    partition_max_bytes: int,
    forgotten: Sequence[tuple[str, int]] = (),
    isolation_level: int = 0,
) -> bytes:
    """The body of a Fetch v11 request; partitions of one topic are sent together,
    topics in the order they first appear."""
    by_topic: dict[str, list[bytes]] = {}
    pack = _PARTITION.pack
    for (topic, partition), (offset, start, epoch) in partitions.items():
        by_topic.setdefault(topic, []).append(
            pack(partition, epoch, offset, start, partition_max_bytes)
        )
    out = [
        _HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level,
                   session_id, session_epoch),
        _I32.pack(len(by_topic)),
    ]
    for topic, parts in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(parts)))
        out.extend(parts)
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    out.append(_I32.pack(len(gone)))
    for topic, indexes in gone.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(indexes)))
        out.append(struct.pack(f">{len(indexes)}i", *indexes))
    out.append(_I16.pack(0))  # rack_id: ""
    return b"".join(out)


class FetchResponse(NamedTuple):
    error_code: int
    session_id: int
    body: memoryview
    start: int  # where the responses array begins

    def partitions(self) -> Iterator[PartitionData]:
        """Each partition of the answer, read from the body as it is walked. Raises
        ValueError for a body that ends early or holds a negative length."""
        return _walk(self.body, self.start)


def decode_response(body: bytes | memoryview) -> FetchResponse:
    """The head of a Fetch v11 response body; its partitions are read by walking it."""
    view = memoryview(body)
    if len(view) < _RESPONSE_HEAD.size:
        raise ValueError("Fetch response shorter than its head")
    _, error_code, session_id = _RESPONSE_HEAD.unpack_from(view, 0)
    return FetchResponse(error_code, session_id, view, _RESPONSE_HEAD.size)


def _walk(view: memoryview, pos: int) -> Iterator[PartitionData]:
    size = len(view)
    i32 = _I32.unpack_from
    result = _RESULT.unpack_from

    def need(n: int) -> None:
        if n < 0 or pos + n > size:
            raise ValueError(f"Fetch response cut short at byte {pos}")

    need(4)
    (topics,) = i32(view, pos)
    pos += 4
    need(topics)  # each topic takes at least a byte: a count beyond the body is a lie
    for _ in range(topics):
        need(2)
        (length,) = _I16.unpack_from(view, pos)
        pos += 2
        need(length)
        topic = str(view[pos : pos + length], "utf-8")
        pos += length
        need(4)
        (count,) = i32(view, pos)
        pos += 4
        need(count)
        for _ in range(count):
            need(_RESULT.size + 4)
            partition, error_code, high_watermark, stable, log_start = result(view, pos)
            pos += _RESULT.size
            (n_aborted,) = i32(view, pos)
            pos += 4
            aborted = None
            if n_aborted > 0:
                end = pos + n_aborted * _ABORTED_SIZE
                need(end - pos)
                aborted = list(_ABORTED.iter_unpack(view[pos:end]))
                pos = end
            need(8)
            (length,) = i32(view, pos + 4)  # after preferred_read_replica
            pos += 8
            records: memoryview | None = None
            if length >= 0:
                need(length)
                records = view[pos : pos + length]
                pos += length
            yield PartitionData(topic, partition, error_code, high_watermark, log_start,
                                records, stable, aborted)
