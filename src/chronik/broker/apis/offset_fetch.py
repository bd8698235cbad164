"""OffsetFetch (API key 9), versions 1-9; v8+ asks for several groups at once; v7+
may require stable offsets (UNSTABLE_OFFSET_COMMIT while a transaction holds one).

Needs DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED: the group's error in v8+,
the top-level one before) and DESCRIBE on each topic: a refused topic asked for answers
TOPIC_AUTHORIZATION_FAILED partitions, and "all topics" leaves refused ones out (Kafka's
KafkaApis.handleOffsetFetchRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.committed_offsets import FetchedOffset
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 9
VERSIONS = (1, 9)
MULTI_GROUP_FROM = 8
TOP_LEVEL_ERROR_FROM = 2


def _topics(ctx: RequestContext, fetched: list[FetchedOffset], topic_cls: str, part_cls: str):
    by_topic: dict[str, list[FetchedOffset]] = {}
    for f in fetched:
        by_topic.setdefault(f.topic, []).append(f)
    return tuple(
        ctx.build(
            topic_cls,
            name=name,
            partitions=tuple(
                ctx.build(
                    part_cls,
                    partition_index=f.partition,
                    committed_offset=f.offset,
                    committed_leader_epoch=f.leader_epoch,
                    metadata=f.metadata,
                    error_code=f.error,
                )
                for f in offsets
            ),
        )
        for name, offsets in by_topic.items()
    )


def _wanted(topics: Any) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def _fetch(
    ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None, stable: bool
) -> tuple[int, list[FetchedOffset]]:
    """A group's offsets as the principal may see them."""
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return errors.GROUP_AUTHORIZATION_FAILED, []
    coordinator = ctx.services.coordinator
    if wanted is None:
        code, fetched = coordinator.fetch_offsets(group_id, None, stable)
        seen = {
            f.topic: ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, f.topic) for f in fetched
        }
        return code, [f for f in fetched if seen[f.topic]]
    refused = [
        (t, parts)
        for t, parts in wanted
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t)
    ]
    if not refused:
        return coordinator.fetch_offsets(group_id, wanted, stable)
    names = {t for t, _ in refused}
    code, fetched = coordinator.fetch_offsets(
        group_id, [(t, parts) for t, parts in wanted if t not in names], stable
    )
    if code:
        return code, fetched
    return code, fetched + [
        FetchedOffset(t, p, -1, -1, "", errors.TOPIC_AUTHORIZATION_FAILED)
        for t, parts in refused
        for p in parts
    ]


async def handle(ctx: RequestContext, request: Any) -> Any:
    stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= MULTI_GROUP_FROM:
        groups = []
        for g in request.groups:
            code, fetched = _fetch(ctx, g.group_id, _wanted(g.topics), stable)
            groups.append(
                ctx.build(
                    "OffsetFetchResponseGroup",
                    group_id=g.group_id,
                    error_code=code,
                    topics=_topics(
                        ctx, fetched, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"
                    ),
                )
            )
        return ctx.build("OffsetFetchResponse", throttle_time=0, groups=tuple(groups))
    topics = request.topics
    if ctx.api_version < 2 and not topics:
        topics = ()  # v1 has no "all topics" form
    wanted = _wanted(topics)
    code, fetched = _fetch(ctx, request.group_id, wanted, stable)
    if code and ctx.api_version < TOP_LEVEL_ERROR_FROM:
        # No top-level error before v2: each partition asked for carries it (Kafka's
        # OffsetFetchRequest.getErrorResponse).
        fetched = [
            FetchedOffset(t, p, -1, -1, "", code)
            for t, partitions in wanted or ()
            for p in partitions
        ]
    return ctx.build(
        "OffsetFetchResponse",
        throttle_time=0,
        error_code=code,
        topics=_topics(ctx, fetched, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition"),
    )
