"""AddPartitionsToTxn (API key 24), versions 0-3: a transactional producer names the
partitions it is about to write. The coordinator stores them with the transaction
(Ongoing) before answering. A partition that does not exist is
UNKNOWN_TOPIC_OR_PARTITION and then every other one OPERATION_NOT_ATTEMPTED, nothing
added, as Kafka answers. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
Versions 4+ (the brokers' batched verification, KIP-890) are not served.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import partition_count
from chronik.coordinator.transaction_coordinator import client_code
from chronik.protocol import errors

API_KEY = 24
VERSIONS = (0, 3)
OPERATION_NOT_ATTEMPTED = 55


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    wanted = [
        (t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions
    ]
    unknown = {
        (name, p)
        for name, p in wanted
        if not 0 <= p < (partition_count(broker, name) or 0)
    }
    coordinator = broker.txn_coordinator
    if unknown:
        codes = {
            tp: errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    else:
        if coordinator is None:
            code = errors.COORDINATOR_NOT_AVAILABLE
        else:
            code = await coordinator.add_partitions(
                request.v3_and_below_transactional_id,
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
