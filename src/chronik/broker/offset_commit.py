"""OffsetCommit (API key 8), versions 2-9.

Answered only once the offsets are appended to __consumer_offsets and fsynced.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.committed_offsets import CommitRequest

API_KEY = 8
VERSIONS = (2, 9)


async def handle(ctx: RequestContext, request: Any) -> Any:
    commits = [
        CommitRequest(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    codes = await ctx.broker.coordinator.commit_offsets(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        getattr(request, "group_instance_id", None),
        commits,
    )
    it = iter(codes)
    topics = tuple(
        ctx.build(
            "OffsetCommitResponseTopic",
            name=topic.name,
            partitions=tuple(
                ctx.build(
                    "OffsetCommitResponsePartition",
                    partition_index=p.partition_index,
                    error_code=next(it),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return ctx.build("OffsetCommitResponse", throttle_time=0, topics=topics)
