"""DeleteRecords (API key 21), versions 0-2: advances a partition's log start offset.

Each topic needs DELETE on the Topic, else its partitions answer
TOPIC_AUTHORIZATION_FAILED (low watermark -1), as Kafka's KafkaApis.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import data_partition
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType
from chronik.storage.errors import StorageError

API_KEY = 21
VERSIONS = (0, 2)
HIGH_WATERMARK = -1


async def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for wanted in request.topics:
        allowed = ctx.allowed(Operation.DELETE, ResourceType.TOPIC, wanted.name)
        topic = ctx.services.catalog.get(wanted.name)
        parts = []
        for p in wanted.partitions:
            low = -1
            if allowed:
                plog, code = data_partition(ctx.services, topic, wanted.name, p.partition_index)
            else:
                plog, code = None, errors.TOPIC_AUTHORIZATION_FAILED
            if plog is not None:
                # As Kafka: no further than the high watermark, so a follower can
                # always follow the new log start.
                offset = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                if not 0 <= offset <= plog.high_watermark:
                    code = errors.OFFSET_OUT_OF_RANGE
                else:
                    try:
                        low = plog.delete_records(offset)
                    except StorageError as exc:
                        code = exc.code
            parts.append(
                ctx.build(
                    "DeleteRecordsPartitionResult",
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=code,
                )
            )
        topics.append(
            ctx.build("DeleteRecordsTopicResult", name=wanted.name, partitions=tuple(parts))
        )
    return ctx.build("DeleteRecordsResponse", throttle_time=0, topics=tuple(topics))
