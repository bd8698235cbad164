"""OffsetCommit (API key 8), versions 2-9.

Needs READ on the group (else every partition is GROUP_AUTHORIZATION_FAILED) and READ on
each topic: a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED and not
committed, the others are (Kafka's KafkaApis.handleOffsetCommitRequest).
Answered only once the offsets are appended to __consumer_offsets and fsynced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.committed_offsets import CommitRequest
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

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


async def commit_readable(
    ctx: RequestContext,
    topics: Any,
    commit: Callable[[list[CommitRequest]], Awaitable[list[int]]],
) -> list[int]:
    """One code per partition of ``topics``, in request order: the partitions of topics
    the principal may not READ are TOPIC_AUTHORIZATION_FAILED, the rest are handed to
    ``commit`` (not called when every topic was refused, as Kafka)."""
    topics = list(topics)
    readable = [t for t in topics if ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name)]
    if len(readable) == len(topics):
        return await commit(commit_requests(topics))
    answered = iter(await commit(commit_requests(readable)) if readable else ())
    refused = errors.TOPIC_AUTHORIZATION_FAILED
    allowed = {id(t) for t in readable}
    return [next(answered) if id(t) in allowed else refused for t in topics for _ in t.partitions]


def every_partition(topics: Any, code: int) -> list[int]:
    return [code for t in topics for _ in t.partitions]


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        codes = every_partition(request.topics, errors.GROUP_AUTHORIZATION_FAILED)
    else:
        coordinator = ctx.services.coordinator
        codes = await commit_readable(
            ctx,
            request.topics,
            lambda commits: coordinator.commit_offsets(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                getattr(request, "group_instance_id", None),
                commits,
            ),
        )
    topics = topic_responses(
        ctx, request.topics, codes, "OffsetCommitResponseTopic", "OffsetCommitResponsePartition"
    )
    return ctx.build("OffsetCommitResponse", throttle_time=0, topics=topics)
