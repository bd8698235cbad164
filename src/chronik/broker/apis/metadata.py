"""Metadata (API key 3), versions 0-12.

Authorization as Kafka's KafkaApis: a request for every topic lists only those the
principal may DESCRIBE; a topic named without DESCRIBE answers TOPIC_AUTHORIZATION_FAILED,
and auto-creating one needs CREATE on the Cluster or the Topic (else
TOPIC_AUTHORIZATION_FAILED, nothing created). v8+ fills in the authorized-operations bit
sets when asked (the cluster's v8-10, 0 without DESCRIBE on it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import (
    cluster_get_or_create,
    cluster_members,
    get_or_create,
    is_internal,
)
from chronik.protocol import errors
from chronik.protocol.compat import ZERO_UUID
from chronik.security.acl_model import CLUSTER_NAME, Operation, ResourceType

API_KEY = 3
VERSIONS = (0, 12)
# Kafka's "authorized operations not requested" marker.
OPERATIONS_OMITTED = -(2**31)
# v10 and v11 carry topic ids and nullable names on the wire, but Kafka serves
# neither before v12.
TOPIC_IDS_FROM = 12


def _names_by_id(wanted: Any) -> bool:
    topic_id = getattr(wanted, "topic_id", None)
    return wanted.name is None or (topic_id is not None and topic_id != ZERO_UUID)


def _cluster_partitions(ctx: RequestContext, name: str) -> tuple[Any, ...]:
    """Each partition as the cluster has it: a partition whose leader's broker is down has
    leader -1 and LEADER_NOT_AVAILABLE, and its dead replicas are offline."""
    view = ctx.services.cluster.view
    topic = view.topics.get(name)
    if topic is None:
        return ()
    live = view.brokers
    entries = []
    for index in range(topic.partition_count):
        replicas = topic.assignment.replicas.get(index, [])
        state = topic.states.get(index)
        leader = view.leader_of(name, index)
        entries.append(
            ctx.build(
                "MetadataResponsePartition",
                error_code=errors.NONE if leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=leader,
                leader_epoch=state.leader_epoch if state is not None else -1,
                replica_nodes=tuple(replicas),
                isr_nodes=tuple(state.isr) if state is not None else (),
                offline_replicas=tuple(r for r in replicas if r not in live),
            )
        )
    return tuple(entries)


def _topic_entry(ctx: RequestContext, topic: Any, ops: int = OPERATIONS_OMITTED) -> Any:
    if ctx.services.cluster is not None:
        return ctx.build(
            "MetadataResponseTopic",
            error_code=errors.NONE,
            name=topic.name,
            topic_id=topic.assignment.topic_id,
            is_internal=is_internal(topic.name),
            partitions=_cluster_partitions(ctx, topic.name),
            topic_authorized_operations=ops,
        )
    node = ctx.services.node_id
    partitions = tuple(
        ctx.build(
            "MetadataResponsePartition",
            error_code=errors.NONE,
            partition_index=index,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=(node,),
            isr_nodes=(node,),
            offline_replicas=(),
        )
        for index in range(len(topic.partitions))
    )
    return ctx.build(
        "MetadataResponseTopic",
        error_code=errors.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=is_internal(topic.name),
        partitions=partitions,
        topic_authorized_operations=ops,
    )


def _missing(
    ctx: RequestContext,
    name: str | None,
    code: int,
    topic_id: Any = ZERO_UUID,
    ops: int = OPERATIONS_OMITTED,
    internal: bool = False,
) -> Any:
    return ctx.build(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=internal,
        partitions=(),
        topic_authorized_operations=ops,
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    catalog = broker.catalog
    requested = request.topics
    if ctx.api_version == 0 and not requested:
        requested = None  # v0 has no null: an empty list means every topic
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    with_ops = ctx.api_version >= 8 and getattr(
        request, "include_topic_authorized_operations", False
    )

    def ops(name: str) -> int:
        if not with_ops:
            return OPERATIONS_OMITTED
        return ctx.authorized_operations(ResourceType.TOPIC, name)

    def describable(name: str) -> bool:
        return ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)

    entries = []
    topics = catalog.topics if broker.cluster is None else broker.cluster.view.topics
    if requested is None:
        entries = [
            _topic_entry(ctx, t, ops(t.name))
            for t in sorted(topics.values(), key=lambda t: t.name)
            if describable(t.name)
        ]
    elif ctx.api_version < TOPIC_IDS_FROM and any(_names_by_id(t) for t in requested):
        # Kafka refuses such a request as a whole: every topic INVALID_REQUEST, a null
        # name answered as "" since these versions' responses cannot carry null.
        entries = [
            _missing(
                ctx,
                wanted.name or "",
                errors.INVALID_REQUEST,
                getattr(wanted, "topic_id", None) or ZERO_UUID,
            )
            for wanted in requested
        ]
    else:
        # What each named topic may be: None refused (no DESCRIBE), False looked up only,
        # True looked up and auto-created if missing.
        auto = allow_auto and broker.config.auto_create_topics
        may_create: dict[str, bool | None] = {}
        for wanted in requested:
            name = wanted.name
            if name is None or name in may_create:
                continue
            if not describable(name):
                may_create[name] = None
            elif auto and name not in topics:
                may_create[name] = _creatable(ctx, name)
            else:
                may_create[name] = auto
        if broker.cluster is not None and allow_auto:
            # Every unknown topic is created at once, so a request naming many waits once.
            names = {n for n, create in may_create.items() if create}
            await asyncio.gather(
                *(cluster_get_or_create(broker, n, allow_auto) for n in sorted(names))
            )
        for wanted in requested:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is None:
                # Neither a name nor an id: nothing to look up.
                entries.append(_missing(ctx, None, errors.INVALID_REQUEST))
                continue
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                from chronik.broker.topics import topic_by_id

                topic = (
                    topic_by_id(broker, topic_id)
                    if broker.cluster is None
                    else broker.cluster.view.topic_by_id(topic_id)
                )
                if topic is None:
                    entries.append(_missing(ctx, None, errors.UNKNOWN_TOPIC_ID, topic_id))
                elif not describable(topic.name):
                    # Kafka names no topic the principal may not describe.
                    entries.append(_missing(ctx, None, errors.TOPIC_AUTHORIZATION_FAILED, topic_id))
                else:
                    entries.append(_topic_entry(ctx, topic, ops(topic.name)))
                continue
            create = may_create[name]
            if create is None:
                entries.append(_missing(ctx, name, errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            if broker.cluster is not None:
                topic = await cluster_get_or_create(broker, name, create)
            else:
                topic = get_or_create(broker, name, create)
            if topic is None and auto and not create:
                entries.append(
                    _missing(
                        ctx, name, errors.TOPIC_AUTHORIZATION_FAILED, internal=is_internal(name)
                    )
                )
            elif topic is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION
                if not _valid_name(name):
                    code = errors.INVALID_TOPIC_EXCEPTION
                entries.append(_missing(ctx, name, code, ops=ops(name)))
            else:
                entries.append(_topic_entry(ctx, topic, ops(name)))
    members, controller = cluster_members(broker, ctx.listener)
    brokers = tuple(
        ctx.build("MetadataResponseBroker", node_id=node, host=host, port=port, rack=rack)
        for node, host, port, rack in members
    )
    cluster_ops = OPERATIONS_OMITTED
    if 8 <= ctx.api_version <= 10 and getattr(
        request, "include_cluster_authorized_operations", False
    ):
        cluster_ops = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.allowed_on_cluster(Operation.DESCRIBE)
            else 0
        )
    return ctx.build(
        "MetadataResponse",
        throttle_time=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=controller,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_ops,
    )


def _creatable(ctx: RequestContext, name: str) -> bool:
    """Kafka's auto-creation check: CREATE on the Cluster, or else on the Topic."""
    return ctx.allowed_on_cluster(Operation.CREATE) or ctx.allowed(
        Operation.CREATE, ResourceType.TOPIC, name
    )


def _valid_name(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name)) and name not in (".", "..")
