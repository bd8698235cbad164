"""TxnOffsetCommit (API key 28), versions 0-3.

A transactional producer's consumed offsets (sendOffsetsToTransaction) are appended to
the group's __consumer_offsets partition as part of its transaction; the group sees
them only once the transaction commits (GroupCoordinator.complete_transaction).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.offset_commit import commit_requests, topic_responses

API_KEY = 28
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    codes = await ctx.broker.coordinator.txn_commit_offsets(
        request.group_id,
        request.producer_id,
        request.producer_epoch,
        getattr(request, "generation_id", -1),
        getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None),
        commit_requests(request.topics),
    )
    topics = topic_responses(
        ctx,
        request.topics,
        codes,
        "TxnOffsetCommitResponseTopic",
        "TxnOffsetCommitResponsePartition",
    )
    return ctx.build("TxnOffsetCommitResponse", throttle_time=0, topics=topics)
