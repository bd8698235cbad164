"""OffsetCommit (API key 8), versions 2-9.

Answered only once the offsets are appended to __consumer_offsets and fsynced.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.committed_offsets import CommitRequest

API_KEY = 8
VERSIONS = (2, 9)


def commit_requests(topics: Any) -> list[CommitRequest]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request, in request order."""
    return [
        CommitRequest(
            topic.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for topic in topics
        for p in topic.partitions
    ]


def topic_responses(
    ctx: RequestContext, topics: Any, codes: list[int], topic_cls: str, partition_cls: str
) -> tuple[Any, ...]:
    """One error code per partition, laid out as the request's topics."""
    it = iter(codes)
    return tuple(
        ctx.build(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                ctx.build(partition_cls, partition_index=p.partition_index, error_code=next(it))
                for p in topic.partitions
            ),
        )
        for topic in topics
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    codes = await ctx.broker.coordinator.commit_offsets(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        getattr(request, "group_instance_id", None),
        commit_requests(request.topics),
    )
    topics = topic_responses(
        ctx, request.topics, codes, "OffsetCommitResponseTopic", "OffsetCommitResponsePartition"
    )
    return ctx.build("OffsetCommitResponse", throttle_time=0, topics=topics)
