"""OffsetForLeaderEpoch (API key 23), versions 0-4: where a leader epoch ended (KIP-101).

A follower asks it before fetching again after a leader change, to find where its log
diverged from the leader's; a consumer (KIP-320) asks it to check that the position it
holds was not truncated away. The answer is Kafka's Partition.lastOffsetForLeaderEpoch:
the largest epoch at or below the one asked that this log knows, and the offset where it
ended (the log end offset for the current epoch), or leader epoch -1 / end offset -1
when the log knows none. v2+ fences a caller whose current_leader_epoch differs from
the partition's (FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer).
Authorization as Kafka's KafkaApis: CLUSTER_ACTION on the Cluster (a follower) answers
every topic; else each topic needs DESCRIBE on it, or its partitions are
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.broker.topics import data_partition, leader_epoch
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 23
VERSIONS = (0, 4)
# Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET, and "no current epoch given".
UNDEFINED = (-1, -1)
NO_EPOCH = -1


def fence(current_leader_epoch: int, partition_epoch: int) -> int:
    """Kafka's Partition.checkCurrentLeaderEpoch: -1 asks for no check."""
    if current_leader_epoch == NO_EPOCH:
        return errors.NONE
    if current_leader_epoch < partition_epoch:
        return errors.FENCED_LEADER_EPOCH
    if current_leader_epoch > partition_epoch:
        return errors.UNKNOWN_LEADER_EPOCH
    return errors.NONE


def end_offset_for(plog: Any, requested_epoch: int, current_epoch: int) -> tuple[int, int]:
    """(epoch, end offset) for ``requested_epoch``, from the log's leader-epoch cache.

    A log whose cache is empty has had no epoch recorded: a single node never stamps one
    (it is leader 0 of every partition for their whole life), nor a log written before
    epochs were kept. Its one known epoch is then the current one, which is still being
    written, as Kafka's leader records its epoch when it is elected: the current epoch
    ends at the log end offset, any other is unknown. Without this a consumer that seeks
    to an offset with its epoch (librdkafka validates every such seek) would be told its
    epoch is unknown and reset its position by auto.offset.reset.
    """
    epochs = getattr(plog, "epochs", None)
    if epochs is not None and epochs.entries:
        found = epochs.end_offset_for(requested_epoch, plog.end_offset)
        return int(found[0]), int(found[1])
    if requested_epoch >= 0 and requested_epoch == current_epoch:
        return current_epoch, plog.end_offset
    return UNDEFINED


def _partition_answer(broker: Services, topic: Any, name: str, p: Any) -> tuple[int, int, int]:
    """(error code, epoch, end offset) for one partition of the request."""
    index = p.partition
    current = getattr(p, "current_leader_epoch", NO_EPOCH)
    cluster = broker.cluster
    if cluster is not None:
        count = cluster.partition_count(name)
        if count is None or not 0 <= index < count:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, *UNDEFINED
        # Kafka checks the epoch of a partition it holds a replica of before asking whether
        # it leads it; a broker holding none only answers that it is not the leader.
        if cluster.node_id not in cluster.view.replicas(name, index):
            return errors.NOT_LEADER_OR_FOLLOWER, *UNDEFINED
    elif topic is None or not 0 <= index < len(topic.partitions):
        return errors.UNKNOWN_TOPIC_OR_PARTITION, *UNDEFINED
    partition_epoch = leader_epoch(broker, name, index)
    code = fence(current, partition_epoch)
    if code != errors.NONE:
        return code, *UNDEFINED
    plog, code = data_partition(broker, topic, name, index)
    if plog is None:
        return code, *UNDEFINED
    epoch, end = end_offset_for(plog, p.leader_epoch, partition_epoch)
    return errors.NONE, epoch, end


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    every_topic = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    topics = []
    for wanted in request.topics:
        allowed = every_topic or ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, wanted.topic)
        topic = broker.catalog.get(wanted.topic)
        parts = []
        for p in wanted.partitions:
            if allowed:
                code, epoch, end = _partition_answer(broker, topic, wanted.topic, p)
            else:
                code, epoch, end = errors.TOPIC_AUTHORIZATION_FAILED, *UNDEFINED
            parts.append(
                ctx.build(
                    "EpochEndOffset",
                    error_code=code,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            ctx.build("OffsetForLeaderTopicResult", topic=wanted.topic, partitions=tuple(parts))
        )
    return ctx.build("OffsetForLeaderEpochResponse", throttle_time=0, topics=tuple(topics))
