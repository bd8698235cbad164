"""DescribeProducers (API key 61), version 0.

The active producers of each partition this broker leads, from the partition's producer
state (what Kafka's kafka-transactions.sh describe-producers shows): id, epoch, last
sequence (-1 for a producer that only wrote transactional markers), last write time,
coordinator epoch and the first offset of its open transaction (-1 if none).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import data_partition

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


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.broker.catalog
    topics = []
    for wanted in request.topics:
        topic = catalog.get(wanted.name)
        parts = []
        for index in wanted.partition_indexes:
            plog, code = data_partition(ctx.broker, topic, wanted.name, index)
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
