"""TxnOffsetCommit (API key 28), versions 0-3.

A transactional producer's consumed offsets (sendOffsetsToTransaction) are appended to
the group's __consumer_offsets partition as part of its transaction; the group sees
them only once the transaction commits (GroupCoordinator.complete_transaction).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.committed_offsets import CommitRequest

API_KEY = 28
VERSIONS = (0, 3)


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
    codes = await ctx.broker.coordinator.txn_commit_offsets(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        commits,
    )
    it = iter(codes)
    topics = tuple(
        ctx.build(
            "TxnOffsetCommitResponseTopic",
            name=topic.name,
            partitions=tuple(
                ctx.build(
                    "TxnOffsetCommitResponsePartition",
                    partition_index=p.partition_index,
                    error_code=next(it),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return ctx.build("TxnOffsetCommitResponse", throttle_time=0, topics=topics)
