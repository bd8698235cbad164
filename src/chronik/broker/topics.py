"""Topic lookups shared by the handlers, including Kafka's auto-creation."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from chronik.protocol import errors

if TYPE_CHECKING:
    import uuid

    from chronik.broker.services import Services
    from chronik.cluster.view import TopicView
    from chronik.storage.catalog import Topic
    from chronik.storage.partition_log import PartitionLog

log = logging.getLogger("chronik.topics")


def too_many_partitions(broker: Services, requested: int) -> str | None:
    """The message for a CreateTopics / CreatePartitions request over the per-request limit
    (Kafka's controller answers such a request POLICY_VIOLATION, for every topic in it)."""
    limit = broker.config.max_partitions_per_request
    if requested <= limit:
        return None
    return (
        f"Excessively large number of partitions per request: {requested} requested, "
        f"the limit is {limit} (max.partitions.per.request)."
    )


# The topics only the broker itself writes (Kafka's Topic.isInternal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def is_internal(name: str) -> bool:
    return name.startswith("__")


def get_or_create(
    broker: Services, name: str, allow_auto_create: bool = True
) -> Topic | None:
    """The topic, created with the broker's defaults if Kafka would auto-create it."""
    topic = broker.catalog.get(name)
    if topic is not None or not (allow_auto_create and broker.config.auto_create_topics):
        return topic
    try:
        topic = broker.catalog.create_topic(name, broker.config.num_partitions, {})
    except Exception as exc:  # invalid name, or a race with a concurrent create
        log.info("not auto-creating topic %r: %s", name, exc)
        return broker.catalog.get(name)
    log.info("auto-created topic %s with %d partitions", name, broker.config.num_partitions)
    return topic


def topic_by_id(broker: Services, topic_id: uuid.UUID) -> Topic | None:
    for topic in broker.catalog.topics.values():
        if topic.topic_id == topic_id:
            return topic
    return None


def partition_count(broker: Services, name: str) -> int | None:
    """The topic's partitions: in a cluster, as the cluster has them (this broker may
    store few or none of them); None when there is no such topic."""
    if broker.cluster is not None:
        return broker.cluster.partition_count(name)
    topic = broker.catalog.get(name)
    return None if topic is None else len(topic.partitions)


def data_partition(
    broker: Services, topic: Topic | None, name: str, index: int
) -> tuple[PartitionLog | None, int]:
    """The log a data request (Produce, Fetch, ListOffsets, DeleteRecords) for partition
    ``index`` of ``name`` reads or writes, with error 0; or None and the error code: in a
    cluster NOT_LEADER_OR_FOLLOWER when another broker leads it (or nobody does)."""

    if broker.cluster is not None:
        code = broker.cluster.partition_error(name, index)
        if code != errors.NONE:
            return None, code
        return broker.cluster.local_log(name, index), errors.NONE
    if topic is None or not 0 <= index < len(topic.partitions):
        return None, errors.UNKNOWN_TOPIC_OR_PARTITION
    return topic.partitions[index], errors.NONE


def leader_epoch(broker: Services, name: str, index: int) -> int:
    """The partition's leader epoch: the controller's count in a cluster, 0 on one node."""
    if broker.cluster is None:
        return 0
    state = broker.cluster.view.state(name, index)
    return state.leader_epoch if state is not None else -1


# How long a Metadata request that auto-creates a topic in a cluster waits for its leaders
# before answering LEADER_NOT_AVAILABLE (the client then asks again).
AUTO_CREATE_WAIT_MS = 1000


async def cluster_get_or_create(
    broker: Services, name: str, allow_auto_create: bool = True
) -> TopicView | None:
    """The cluster's view of the topic, created with the broker's defaults if Kafka would
    auto-create it: any broker writes it, the controller gives it leaders."""
    cluster = broker.cluster
    topic = cluster.view.topics.get(name)
    if topic is not None or not (allow_auto_create and broker.config.auto_create_topics):
        return topic
    try:
        await cluster.create_topic(
            name,
            broker.config.num_partitions,
            broker.config.default_replication_factor,
            {},
            timeout_ms=AUTO_CREATE_WAIT_MS,
        )
        log.info("auto-created topic %s with %d partitions", name, broker.config.num_partitions)
    except Exception as exc:  # invalid name, a concurrent create, leaders still coming
        log.info("auto-creating topic %r: %s", name, exc)
    return cluster.view.topics.get(name)


def cluster_members(
    broker: Services, listener: str = "PLAINTEXT"
) -> tuple[list[tuple[int, str, int, str | None]], int]:
    """The brokers a client is told about, as (node id, host, port, rack), and the
    controller's id: in a cluster every live broker, on a single node just this one;
    each at its endpoint for the listener the client came in on."""
    if broker.cluster is not None:
        members = [
            (b.node_id, *b.endpoint(listener), b.rack) for b in broker.cluster.live_brokers()
        ]
        return members, broker.cluster.controller_id()
    return [(broker.node_id, *broker.security.endpoint(listener), None)], broker.node_id
