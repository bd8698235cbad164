"""OffsetDelete (API key 47), version 0."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    top, codes = await ctx.broker.coordinator.delete_offsets(request.group_id, wanted)
    it = iter(codes)
    topics = ()
    if not top:
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
