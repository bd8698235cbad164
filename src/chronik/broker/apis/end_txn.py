"""EndTxn (API key 26), versions 0-3: commit or abort the producer's transaction. The
coordinator stores PrepareCommit/PrepareAbort and answers; the markers and the
completion follow (chronik.coordinator.transaction_coordinator). A retry of a finished
transaction with the same result answers NONE (a retry while its markers are written
waits for them); the other result INVALID_TXN_STATE.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

Needs WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's
KafkaApis.handleEndTxnRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.transaction_coordinator import client_code
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 26
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.txn_coordinator
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif coordinator is None:
        code = errors.COORDINATOR_NOT_AVAILABLE
    else:
        code = await coordinator.end_transaction(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            bool(request.committed),
        )
    return ctx.build(
        "EndTxnResponse", throttle_time=0, error_code=client_code(code, ctx.api_version, 2)
    )
