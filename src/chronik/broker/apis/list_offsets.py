"""ListOffsets (API key 2), versions 0-9 (v0 answers a list of one offset).

Timestamps: -1 latest, -2 earliest, -3 the record with the largest timestamp
(v7+), -4 earliest local (v8+, the same as earliest here), otherwise the first
offset whose timestamp is at or after the one asked (from the time index).
With isolation_level=1 (read_committed, v2+) the bound is the last stable offset instead
of the high watermark, as Kafka answers.
Each topic needs DESCRIBE on the Topic; without it its partitions answer
TOPIC_AUTHORIZATION_FAILED (offset and timestamp -1), as Kafka's KafkaApis.
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import data_partition, leader_epoch
from chronik.protocol import errors
from chronik.records.reader import CorruptRecords
from chronik.security.acl_model import Operation, ResourceType

log = logging.getLogger("chronik.list_offsets")

API_KEY = 2
VERSIONS = (0, 9)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5


def _lookup(plog: Any, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) as a consumer may see them: nothing at or past the high
    watermark, which in a cluster is what every in-sync replica has (the last stable
    offset for read_committed)."""
    bound = plog.last_stable_offset if committed else plog.high_watermark
    if timestamp == LATEST:
        return -1, bound
    if timestamp in (EARLIEST, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD):
        return -1, plog.start_offset
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp()
        if found is None or not 0 <= found[1] < bound:
            return -1, -1
        return found
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found[0] >= bound:
        return -1, -1
    offset, ts = found
    return ts, offset


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.services.catalog
    committed = getattr(request, "isolation_level", 0) == 1
    topics = []
    for wanted in request.topics:
        allowed = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, wanted.name)
        topic = catalog.get(wanted.name) if allowed else None
        parts = []
        for p in wanted.partitions:
            index = p.partition_index
            if allowed:
                plog, code = data_partition(ctx.services, topic, wanted.name, index)
            else:
                plog, code = None, errors.TOPIC_AUTHORIZATION_FAILED
            if plog is None:
                ts, offset = -1, -1
            else:
                try:
                    ts, offset = _lookup(plog, p.timestamp, committed)
                except CorruptRecords as exc:
                    # A client sealed undecodable records with a valid CRC; the lookup
                    # cannot see past them.
                    log.warning("offset lookup in %s-%d: %s", wanted.name, index, exc)
                    code, ts, offset = errors.CORRUPT_MESSAGE, -1, -1
            parts.append(
                ctx.build(
                    "ListOffsetsPartitionResponse",
                    partition_index=index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                    leader_epoch=leader_epoch(ctx.services, wanted.name, index)
                    if code == errors.NONE
                    else -1,
                )
            )
        topics.append(
            ctx.build("ListOffsetsTopicResponse", name=wanted.name, partitions=tuple(parts))
        )
    return ctx.build("ListOffsetsResponse", throttle_time=0, topics=tuple(topics))
