"""GET /console/api/topics/{name}/messages: records read with Fetch at their partitions'
leaders, as the session's principal (READ on the topic, as any consumer).

Where a read starts: ``from=beginning`` (the log start), ``offset`` (``offset=N``, clamped
to the log), ``timestamp`` (``timestamp=MS``: the first record at or after it, by
ListOffsets) or ``end`` (the last ``limit`` records). Without ``partition`` every
partition is read and the records merged by timestamp, each partition's kept in offset
order. ``key=K`` keeps the records whose key is exactly K's UTF-8 bytes. A request reads
at most ``max_bytes`` of record batches (console.messages.max.bytes) in at most
MAX_ROUNDS fetches, and answers where to go on:
``next_offset`` for one partition, ``next_offsets`` per partition for all of them, and
``at_end`` when every partition read was read to its end (its high watermark then).

Going on over all partitions: ``offsets=P:N,P:N,...`` (the ``next_offsets`` of the last
page) reads each partition named from its offset (clamped to the log) and forwards, a
partition not named (one added since) as ``from`` says; a record cut from a page by the
merge is not counted as read, so paging shows each record once. It names each partition
of the topic at most once, and is refused (400) with ``partition``.

Values are shown as text when UTF-8, pretty JSON when they parse, hex otherwise, and,
when a schema registry is served and the principal may DESCRIBE ``_schemas``, framed
values (magic byte 0, 4-byte schema id) decoded to JSON with their schema id.
``format=text|json|hex|schema`` asks for one rendering (falling back as above when the
value does not fit it). Control batches (transaction markers) are not shown.
"""

from __future__ import annotations

import asyncio
import heapq
import json
from collections.abc import Callable
from typing import Any

from chronik.http.console.kafka import (
    EARLIEST,
    FETCH,
    LATEST,
    KafkaSession,
    check,
    entity,
    error_name,
    leaders,
)
from chronik.http.console.params import MAX_LIMIT, int_param
from chronik.http.server import HttpError
from chronik.records.batch import TIMESTAMP_TYPE_BIT
from chronik.records.reader import CorruptRecords, DecodedRecord, iter_batches, iter_records

FORMATS = ("auto", "text", "json", "hex", "schema")
STARTS = ("beginning", "offset", "timestamp", "end")
MAX_ROUNDS = 32
PARTITION_MAX_BYTES = 1024 * 1024
MIN_PARTITION_BYTES = 64 * 1024
MAX_PARTITIONS = 10_000
# One "P:N" of the offsets parameter: a partition (int32) and an offset (below 2**62).
MAX_OFFSET_ITEM_CHARS = 10 + 1 + 19


class Reading:
    """One partition's read: where it is, where it ends, what it kept."""

    __slots__ = ("partition", "leader", "pos", "end", "records")

    def __init__(self, partition: int, leader: int, pos: int, end: int) -> None:
        self.partition = partition
        self.leader = leader
        self.pos = pos
        self.end = end
        self.records: list[tuple[DecodedRecord, str]] = []


async def read_messages(
    kafka: KafkaSession,
    topic: str,
    query: dict[str, str],
    max_bytes: int,
    decoder: Callable[[bytes | None], dict[str, Any]] | None,
) -> dict[str, Any]:
    limit = int_param(query, "limit", 50, 1, MAX_LIMIT)
    start = query.get("from") or ("offset" if query.get("offset") else "beginning")
    if start not in STARTS:
        raise HttpError(400, "bad_request", f"from must be one of {', '.join(STARTS)}")
    fmt = query.get("format") or "auto"
    if fmt not in FORMATS:
        raise HttpError(400, "bad_request", f"format must be one of {', '.join(FORMATS)}")
    key_text = query.get("key")
    key = key_text.encode("utf-8") if key_text is not None and key_text != "" else None
    meta = await kafka.topic_metadata(topic)
    led = leaders(meta)
    going_on = parse_offsets(query.get("offsets", ""), {p for _, p in led})
    if "partition" in query and query["partition"] != "":
        if going_on is not None:
            raise HttpError(400, "bad_request",
                            "offsets goes on over all partitions: give it without partition")
        index = int_param(query, "partition", None, 0, 2**31 - 1)
        if (topic, index) not in led:
            raise HttpError(404, "UNKNOWN_TOPIC_OR_PARTITION",
                            f"topic {topic!r} has no partition {index}")
        led = {(topic, index): led[(topic, index)]}
        single = True
    else:
        single = False
    if len(led) > MAX_PARTITIONS:
        raise HttpError(400, "bad_request", "too many partitions: choose one")
    unled = [p for (_, p), leader in led.items() if leader < 0]
    if single and unled:
        raise HttpError(503, "LEADER_NOT_AVAILABLE", f"{topic}-{unled[0]} has no leader now")
    wanted = len(led)
    led = {k: v for k, v in led.items() if v >= 0}
    earliest, latest = await asyncio.gather(kafka.list_offsets(led, EARLIEST),
                                            kafka.list_offsets(led, LATEST))
    at: dict[tuple[str, int], int] = {}
    if start == "timestamp":
        ts = int_param(query, "timestamp", None, 0, 2**62)
        at = await kafka.list_offsets(led, dict.fromkeys(led, ts))
    offset = int_param(query, "offset", 0, 0, 2**62) if start == "offset" else 0
    readings: dict[int, Reading] = {}
    for (_, index), leader in sorted(led.items()):
        key_ = (topic, index)
        if key_ not in earliest or key_ not in latest:
            if single:
                raise HttpError(503, "LEADER_NOT_AVAILABLE",
                                f"the offsets of {topic}-{index} cannot be read now")
            continue
        low, high = earliest[key_], latest[key_]
        if going_on is not None and index in going_on:
            pos = min(max(going_on[index], low), high)
        elif start == "beginning":
            pos = low
        elif start == "offset":
            pos = min(max(offset, low), high)
        elif start == "timestamp":
            found = at.get(key_, -1)
            pos = high if found < 0 else found
        else:
            pos = max(low, high - limit)
        readings[index] = Reading(index, leader, pos, high)
    await _fetch_all(kafka, topic, readings, limit, key, max_bytes)
    # Each partition's records stay in offset order (their timestamps need not be), so a
    # page holds a run of each partition's records and one offset per partition says
    # where the next page goes on.
    merged = list(heapq.merge(
        *([(r.timestamp, p.partition, r.offset, r, kind) for r, kind in p.records]
          for p in readings.values()),
        key=lambda row: row[:2],
    ))
    backwards = start == "end" and going_on is None
    shown = merged[-limit:] if backwards else merged[:limit]
    next_offsets = {str(p.partition): p.pos for p in readings.values()}
    if not backwards:
        # Records read but cut by the merge come again on the next page.
        for _, partition, off, _, _ in merged[limit:]:
            next_offsets[str(partition)] = min(next_offsets[str(partition)], off)
    items = [_item(partition, r, kind, fmt, decoder) for _, partition, _, r, kind in shown]
    # A partition not read now (no leader, no offsets) is not at its end.
    at_end = len(readings) == wanted and all(
        next_offsets[str(p.partition)] >= p.end for p in readings.values())
    body: dict[str, Any] = {"items": items, "at_end": at_end}
    if single:
        body["next_offset"] = next(iter(next_offsets.values()), None)
    else:
        body["next_offset"] = None
        body["next_offsets"] = next_offsets
    return body


def parse_offsets(text: str, partitions: set[int]) -> dict[int, int] | None:
    """{partition: offset} of an ``offsets=P:N,P:N`` parameter (None when not given):
    each of the topic's ``partitions`` at most once, else 400."""
    if text == "":
        return None
    if len(text) > max(1, len(partitions)) * (MAX_OFFSET_ITEM_CHARS + 1):
        raise HttpError(400, "bad_request", "offsets names more than the topic's partitions")
    found: dict[int, int] = {}
    for item in text.split(","):
        p_text, sep, o_text = item.strip().partition(":")
        if (not sep or not p_text.isdigit() or not o_text.isdigit()
                or len(p_text) > 10 or len(o_text) > 19):
            raise HttpError(400, "bad_request",
                            f"offsets takes PARTITION:OFFSET,...; {item[:40]!r} is not one")
        partition, offset = int(p_text), int(o_text)
        if partition not in partitions:
            raise HttpError(400, "bad_request",
                            f"offsets names partition {partition}, which the topic does not have")
        if partition in found:
            raise HttpError(400, "bad_request", f"offsets names partition {partition} twice")
        if offset >= 2**62:
            raise HttpError(400, "bad_request", f"offset {offset} of partition {partition} "
                            "is out of range")
        found[partition] = offset
    return found


async def _fetch_all(
    kafka: KafkaSession,
    topic: str,
    readings: dict[int, Reading],
    limit: int,
    key: bytes | None,
    max_bytes: int,
) -> None:
    spent = 0
    for _ in range(MAX_ROUNDS):
        active = [r for r in readings.values() if r.pos < r.end and len(r.records) < limit]
        left = max_bytes - spent
        if not active or left <= 0:
            return
        share = max(MIN_PARTITION_BYTES, min(PARTITION_MAX_BYTES, left // len(active)))
        by_leader: dict[int, list[Reading]] = {}
        for r in active:
            by_leader.setdefault(r.leader, []).append(r)
        answers = await asyncio.gather(
            *(_fetch(kafka, topic, node, rs, share, left) for node, rs in by_leader.items())
        )
        for answer in answers:
            for reading, data in answer:
                spent += _take(reading, data, limit, key)


async def _fetch(
    kafka: KafkaSession, topic: str, node: int, readings: list[Reading], share: int, left: int
) -> list[tuple[Reading, Any]]:
    partitions = tuple(
        entity(FETCH, "FetchPartition", partition=r.partition, current_leader_epoch=-1,
               fetch_offset=r.pos, last_fetched_epoch=-1, log_start_offset=-1,
               partition_max_bytes=share)
        for r in readings
    )
    response = await kafka.send(
        FETCH, node, cluster_id=None, replica_id=-1, max_wait=0, min_bytes=0,
        max_bytes=max(1, min(left, 2**31 - 1)), isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=(entity(FETCH, "FetchTopic", topic=topic, partitions=partitions),),
        forgotten_topics_data=(), rack_id="",
    )
    check(response.error_code, None, f"fetch from {topic!r}")
    by_index = {r.partition: r for r in readings}
    out = []
    for t in response.responses:
        for data in t.partitions:
            reading = by_index.get(int(data.partition_index))
            if reading is None:
                continue
            code = int(data.error_code)
            if code:
                if error_name(code).endswith("_AUTHORIZATION_FAILED"):
                    check(code, None, f"read {topic}-{reading.partition}")
                # Moved leader, an offset gone by retention: this partition stops here.
                reading.end = reading.pos
                continue
            out.append((reading, data))
    return out


def _take(reading: Reading, data: Any, limit: int, key: bytes | None) -> int:
    """Keep a partition's fetched records; the bytes fetched."""
    raw = bytes(data.records or b"")
    reading.end = min(reading.end, int(data.high_watermark)) if int(data.high_watermark) >= 0 \
        else reading.end
    before = reading.pos
    try:
        for position, header in iter_batches(raw):
            if header.is_control:
                reading.pos = max(reading.pos, header.last_offset + 1)
                continue
            if header.last_offset < reading.pos:
                continue
            batch = memoryview(raw)[position : position + header.size]
            kind = "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"
            for record in iter_records(batch):
                if record.offset < reading.pos:
                    continue
                reading.pos = record.offset + 1
                if key is not None and record.key != key:
                    continue
                reading.records.append((record, kind))
                if len(reading.records) >= limit:
                    return len(raw)
            reading.pos = max(reading.pos, header.last_offset + 1)
    except CorruptRecords:
        reading.end = reading.pos
    if reading.pos == before:
        # Nothing came (a batch larger than what was asked for, a gap at the end).
        reading.end = reading.pos
    return len(raw)


def _item(
    partition: int,
    record: DecodedRecord,
    kind: str,
    fmt: str,
    decoder: Callable[[bytes | None], dict[str, Any]] | None,
) -> dict[str, Any]:
    value, value_format, schema_id = render(record.value, fmt, decoder)
    key, key_format = _plain(record.key)
    return {
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": kind,
        "key": key,
        "key_format": key_format,
        "value": value,
        "value_format": value_format,
        "schema_id": schema_id,
        "headers": [
            {"key": name, "value": _plain(v)[0], "value_format": _plain(v)[1]}
            for name, v in record.headers
        ],
    }


def _plain(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return data.hex(), "hex"


def render(
    value: bytes | None,
    fmt: str,
    decoder: Callable[[bytes | None], dict[str, Any]] | None,
) -> tuple[str | None, str | None, int | None]:
    """(shown value, its format, schema id) of a record value."""
    if value is None:
        return None, None, None
    if fmt == "hex":
        return value.hex(), "hex", None
    if fmt in ("auto", "schema") and decoder is not None:
        fields = decoder(value)
        if "value_json" in fields:
            text = json.dumps(fields["value_json"], indent=2, ensure_ascii=False)
            return text, "schema", fields.get("schema_id")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex(), "hex", None
    if fmt != "text":
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        else:
            if isinstance(parsed, (dict, list)):
                return json.dumps(parsed, indent=2, ensure_ascii=False), "json", None
    return text, "text", None
