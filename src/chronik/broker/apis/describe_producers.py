"""DescribeProducers (API key 61), version 0.

The active producers of each partition this broker holds a replica of, from the
replica's producer state (what Kafka's kafka-transactions.sh describe-producers shows):
id, epoch, last sequence (-1 for a producer that only wrote transactional markers), last
write time, coordinator epoch and the first offset of its open transaction (-1 if none).
As in Kafka a follower answers too, from what it has replicated; a broker without a
replica answers NOT_LEADER_OR_FOLLOWER. Each topic needs READ on the Topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED, as Kafka's KafkaApis.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import data_partition
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 61
VERSIONS = (0, 0)


def _producers(ctx: RequestContext, plog: Any) -> tuple[Any, ...]:
    return tuple(
        ctx.build(
            "ProducerState",
            producer_id=pid,
            producer_epoch=entry.epoch,
            last_sequence=entry.batches[-1].last_seq if entry.batches else -1,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for pid, entry in sorted(plog.producer_state.producers.items())
    )


def _replica(ctx: RequestContext, topic: Any, name: str, index: int) -> tuple[Any, int]:
    """The local replica's log of the partition, leader or follower, and error 0; or
    None and Kafka's error (ReplicaManager.getPartitionOrError)."""
    cluster = ctx.services.cluster
    if cluster is None:
        return data_partition(ctx.services, topic, name, index)
    count = cluster.view.partition_count(name)
    if count is None or not 0 <= index < count:
        return None, errors.UNKNOWN_TOPIC_OR_PARTITION
    view = cluster.view.topics.get(name)
    if (
        cluster.node_id not in cluster.view.replicas(name, index)
        or topic is None
        or view is None
        or topic.topic_id != view.assignment.topic_id
        or topic.log(index) is None
    ):
        return None, errors.NOT_LEADER_OR_FOLLOWER
    return topic.log(index), errors.NONE


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.services.catalog
    topics = []
    for wanted in request.topics:
        allowed = ctx.allowed(Operation.READ, ResourceType.TOPIC, wanted.name)
        topic = catalog.get(wanted.name)
        parts = []
        for index in wanted.partition_indexes:
            if allowed:
                plog, code = _replica(ctx, topic, wanted.name, index)
            else:
                plog, code = None, errors.TOPIC_AUTHORIZATION_FAILED
            parts.append(
                ctx.build(
                    "PartitionResponse",
                    partition_index=index,
                    error_code=code,
                    error_message=None,
                    active_producers=_producers(ctx, plog) if plog is not None else (),
                )
            )
        topics.append(ctx.build("TopicResponse", name=wanted.name, partitions=tuple(parts)))
    return ctx.build("DescribeProducersResponse", throttle_time=0, topics=tuple(topics))
