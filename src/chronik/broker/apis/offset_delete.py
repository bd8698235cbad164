"""OffsetDelete (API key 47), version 0.

Needs DELETE on the group (else the whole request is GROUP_AUTHORIZATION_FAILED) and READ
on each topic: a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED and keep their
offsets (Kafka's KafkaApis.handleOffsetDeleteRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return ctx.build(
            "OffsetDeleteResponse",
            error_code=errors.GROUP_AUTHORIZATION_FAILED,
            throttle_time=0,
            topics=(),
        )
    readable = {
        t.name for t in request.topics if ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)
    }
    wanted = [
        (t.name, p.partition_index)
        for t in request.topics
        if t.name in readable
        for p in t.partitions
    ]
    top, deleted = await ctx.services.coordinator.delete_offsets(request.group_id, wanted)
    if top != errors.NONE:  # the group's error alone, no partition answered
        return ctx.build("OffsetDeleteResponse", error_code=top, throttle_time=0, topics=())
    answered = iter(deleted)
    codes = [
        next(answered) if t.name in readable else errors.TOPIC_AUTHORIZATION_FAILED
        for t in request.topics
        for _ in t.partitions
    ]
    it = iter(codes)
    topics = tuple(
        ctx.build(
            "OffsetDeleteResponseTopic",
            name=t.name,
            partitions=tuple(
                ctx.build(
                    "OffsetDeleteResponsePartition",
                    partition_index=p.partition_index,
                    error_code=next(it),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return ctx.build("OffsetDeleteResponse", error_code=top, throttle_time=0, topics=topics)
