"""AddPartitionsToTxn (API key 24), versions 0-3: a transactional producer names the
partitions it is about to write. The coordinator stores them with the transaction
(Ongoing) before answering; while the markers of the producer's last transaction are
being written the request is held and answered once they are durable
(chronik.coordinator.transaction_holds). A partition that does not exist is
UNKNOWN_TOPIC_OR_PARTITION and then every other one OPERATION_NOT_ATTEMPTED, nothing
added, as Kafka answers. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
Versions 4+ (the brokers' batched verification, KIP-890, which Kafka lets only a
principal with CLUSTER_ACTION on the cluster send) are not served.

Needs WRITE on the transactional id (else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic: a refused topic's
partitions are TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED and nothing
is added. With an authorizer the internal topics are always refused, since Kafka never
authorizes a client to add them (KafkaApis.handleAddPartitionsToTxnRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import INTERNAL_TOPICS, partition_count
from chronik.coordinator.transaction_coordinator import client_code
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 24
VERSIONS = (0, 3)
OPERATION_NOT_ATTEMPTED = errors.OPERATION_NOT_ATTEMPTED


def _refused_topics(ctx: RequestContext, topics: set[str]) -> set[str]:
    """The topics the principal may not add to a transaction."""
    internal_refused = ctx.services.authorizer.enabled
    return {
        t
        for t in topics
        if (internal_refused and t in INTERNAL_TOPICS)
        or not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t)
    }


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    txn_id = request.v3_and_below_transactional_id
    txn_allowed = ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    refused = _refused_topics(ctx, {name for name, _ in wanted}) if txn_allowed else set()
    unknown = {
        (name, p)
        for name, p in wanted
        if name not in refused and not 0 <= p < (partition_count(broker, name) or 0)
    }
    coordinator = broker.txn_coordinator
    if not txn_allowed:
        codes = dict.fromkeys(wanted, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif unknown or refused:
        codes = {
            tp: errors.TOPIC_AUTHORIZATION_FAILED
            if tp[0] in refused
            else errors.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    else:
        if coordinator is None:
            code = errors.COORDINATOR_NOT_AVAILABLE
        else:
            code = await coordinator.add_partitions(
                txn_id,
                int(request.v3_and_below_producer_id),
                int(request.v3_and_below_producer_epoch),
                wanted,
            )
        code = client_code(code, ctx.api_version, 2)
        codes = {tp: code for tp in wanted}
    results = []
    for t in request.v3_and_below_topics:
        parts = tuple(
            ctx.build(
                "AddPartitionsToTxnPartitionResult",
                partition_index=int(p),
                partition_error_code=codes[(t.name, int(p))],
            )
            for p in t.partitions
        )
        results.append(
            ctx.build("AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=parts)
        )
    return ctx.build(
        "AddPartitionsToTxnResponse", throttle_time=0, results_by_topic_v3_and_below=tuple(results)
    )
