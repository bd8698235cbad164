"""AddOffsetsToTxn (API key 25), versions 0-3: a transactional producer is about to
commit a group's offsets in its transaction (TxnOffsetCommit follows, to the group
coordinator). The group's __consumer_offsets partition joins the transaction, so the
transaction's end writes a marker there too. Held like AddPartitionsToTxn while the
last transaction's markers are written. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before
v2.

Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then
READ on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka's
KafkaApis.handleAddOffsetsToTxnRequest.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import partition_count
from chronik.coordinator.offsets_codec import partition_for
from chronik.coordinator.transaction_coordinator import client_code
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 25
VERSIONS = (0, 3)
OFFSETS_TOPIC = "__consumer_offsets"


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        code = errors.GROUP_AUTHORIZATION_FAILED
    else:
        code = await _add(ctx, request)
    return ctx.build("AddOffsetsToTxnResponse", throttle_time=0, error_code=code)


async def _add(ctx: RequestContext, request: Any) -> int:
    broker = ctx.services
    coordinator = broker.txn_coordinator
    count = partition_count(broker, OFFSETS_TOPIC)
    if count is None and broker.cluster is None:
        count = broker.config.get_int("offsets.topic.num.partitions")
    if coordinator is None or not count:
        code = errors.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coordinator.add_partitions(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            [(OFFSETS_TOPIC, partition_for(request.group_id, count))],
        )
    return client_code(code, ctx.api_version, 2)
