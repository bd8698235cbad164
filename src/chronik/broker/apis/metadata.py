"""Metadata (API key 3), versions 0-12.

Authorization as Kafka's KafkaApis: a request for every topic lists only those the
principal may DESCRIBE; a topic named without DESCRIBE answers TOPIC_AUTHORIZATION_FAILED,
and auto-creating one needs CREATE on the Cluster or the Topic (else
TOPIC_AUTHORIZATION_FAILED, nothing created). v8+ fills in the authorized-operations bit
sets when asked (the cluster's v8-10, 0 without DESCRIBE on it).

The response is hand-encoded (chronik.protocol.metadata_response), and each topic's
entry is kept, encoded, until the topic changes (chronik.broker.metadata_cache): with
thousands of partitions, a request for every topic would otherwise hold the event loop
for tens of milliseconds. A request for every topic lets other connections have a turn
every SECONDS_PER_TURN while it encodes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
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
from chronik.protocol.metadata_response import (
    PartitionEntry,
    encode_metadata_response,
    encode_topic,
)
from chronik.security.acl_model import CLUSTER_NAME, Operation, ResourceType

API_KEY = 3
VERSIONS = (0, 12)
# Kafka's "authorized operations not requested" marker.
OPERATIONS_OMITTED = -(2**31)
# v10 and v11 carry topic ids and nullable names on the wire, but Kafka serves
# neither before v12.
TOPIC_IDS_FROM = 12
# Time a request for every topic may hold the event loop before others get a turn.
SECONDS_PER_TURN = 0.005


def _names_by_id(wanted: Any) -> bool:
    topic_id = getattr(wanted, "topic_id", None)
    return wanted.name is None or (topic_id is not None and topic_id != ZERO_UUID)


class _Entries:
    """The topic entries of one response: a topic's from the cache while what it shows is
    unchanged, else encoded and kept (chronik.broker.metadata_cache)."""

    def __init__(self, ctx: RequestContext) -> None:
        broker = ctx.services
        self.version = ctx.api_version
        self.cache = broker.metadata_entries
        self.node = broker.node_id if broker.node_id is not None else 0
        self.view = broker.cluster.view if broker.cluster is not None else None
        self.turn_started = time.perf_counter()

    def topic(self, topic: Any, ops: int) -> bytes:
        variant = (self.version, ops)
        view = self.view
        if view is not None:
            stamp: tuple[Any, ...] = (topic.stamp, view.brokers_stamp)
        else:
            stamp = (topic.topic_id, len(topic.partitions))
        data = self.cache.get(topic.name, variant, stamp)
        if data is None:
            data = self._encode(topic, ops)
            self.cache.put(topic.name, variant, stamp, data)
        return data

    def _encode(self, topic: Any, ops: int) -> bytes:
        if self.view is not None:
            return encode_topic(
                self.version,
                errors.NONE,
                topic.name,
                topic.assignment.topic_id,
                is_internal(topic.name),
                _cluster_partitions(topic, self.view.brokers),
                ops,
            )
        node = self.node
        replicas = (node,)
        return encode_topic(
            self.version,
            errors.NONE,
            topic.name,
            topic.topic_id,
            is_internal(topic.name),
            [
                (errors.NONE, index, node, 0, replicas, replicas, ())
                for index in range(len(topic.partitions))
            ],
            ops,
        )

    def missing(
        self,
        name: str | None,
        code: int,
        topic_id: Any = ZERO_UUID,
        ops: int = OPERATIONS_OMITTED,
        internal: bool = False,
    ) -> bytes:
        return encode_topic(self.version, code, name, topic_id, internal, (), ops)

    async def pause(self) -> None:
        """Let the loop serve other connections once this request has had its turn: a
        cold cache with thousands of partitions takes more than a few milliseconds."""
        if time.perf_counter() - self.turn_started >= SECONDS_PER_TURN:
            await asyncio.sleep(0)
            self.turn_started = time.perf_counter()


def _cluster_partitions(topic: Any, live: Mapping[int, Any]) -> list[PartitionEntry]:
    """Each partition as the cluster has it: a partition whose leader's broker is down has
    leader -1 and LEADER_NOT_AVAILABLE, and its dead replicas are offline."""
    replicas_of = topic.assignment.replicas
    states = topic.states
    entries: list[PartitionEntry] = []
    for index in range(topic.partition_count):
        replicas = replicas_of.get(index, ())
        state = states.get(index)
        if state is None:
            leader, epoch, isr = -1, -1, ()
        else:
            leader = state.leader if state.leader in live else -1
            epoch, isr = state.leader_epoch, state.isr
        entries.append(
            (
                errors.NONE if leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                index,
                leader,
                epoch,
                replicas,
                isr,
                [r for r in replicas if r not in live],
            )
        )
    return entries


async def handle(ctx: RequestContext, request: Any) -> list[bytes]:
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

    made = _Entries(ctx)
    entries: list[bytes] = []
    topics = catalog.topics if broker.cluster is None else broker.cluster.view.topics
    if requested is None:
        for t in sorted(topics.values(), key=lambda t: t.name):
            if describable(t.name):
                entries.append(made.topic(t, ops(t.name)))
                await made.pause()
        made.cache.keep_only(topics)
    elif ctx.api_version < TOPIC_IDS_FROM and any(_names_by_id(t) for t in requested):
        # Kafka refuses such a request as a whole: every topic INVALID_REQUEST, a null
        # name answered as "" since these versions' responses cannot carry null.
        entries = [
            made.missing(
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
                entries.append(made.missing(None, errors.INVALID_REQUEST))
                continue
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                from chronik.broker.topics import topic_by_id

                topic = (
                    topic_by_id(broker, topic_id)
                    if broker.cluster is None
                    else broker.cluster.view.topic_by_id(topic_id)
                )
                if topic is None:
                    entries.append(made.missing(None, errors.UNKNOWN_TOPIC_ID, topic_id))
                elif not describable(topic.name):
                    # Kafka names no topic the principal may not describe.
                    entries.append(
                        made.missing(None, errors.TOPIC_AUTHORIZATION_FAILED, topic_id)
                    )
                else:
                    entries.append(made.topic(topic, ops(topic.name)))
                continue
            create = may_create[name]
            if create is None:
                entries.append(made.missing(name, errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            if broker.cluster is not None:
                topic = await cluster_get_or_create(broker, name, create)
            else:
                topic = get_or_create(broker, name, create)
            if topic is None and auto and not create:
                code = errors.TOPIC_AUTHORIZATION_FAILED
                entries.append(made.missing(name, code, internal=is_internal(name)))
            elif topic is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION
                if not _valid_name(name):
                    code = errors.INVALID_TOPIC_EXCEPTION
                entries.append(made.missing(name, code, ops=ops(name)))
            else:
                entries.append(made.topic(topic, ops(name)))
        if len(made.cache) > len(topics):
            made.cache.keep_only(topics)
    members, controller = cluster_members(broker, ctx.listener)
    cluster_ops = OPERATIONS_OMITTED
    if 8 <= ctx.api_version <= 10 and getattr(
        request, "include_cluster_authorized_operations", False
    ):
        cluster_ops = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.allowed_on_cluster(Operation.DESCRIBE)
            else 0
        )
    return encode_metadata_response(
        ctx.api_version, members, broker.cluster_id, controller, entries, cluster_ops
    )


def _creatable(ctx: RequestContext, name: str) -> bool:
    """Kafka's auto-creation check: CREATE on the Cluster, or else on the Topic."""
    return ctx.allowed_on_cluster(Operation.CREATE) or ctx.allowed(
        Operation.CREATE, ResourceType.TOPIC, name
    )


def _valid_name(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name)) and name not in (".", "..")
