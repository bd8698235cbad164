"""InitProducerId (API key 22), versions 0-5.

A producer without a transactional id always gets a fresh producer id with epoch 0, as
Kafka does. A transactional producer's request goes to the transaction coordinator
(chronik.coordinator.transaction_coordinator): the id's producer id with its epoch
bumped, which fences the previous producer of the id (its open transaction is aborted
first, answered CONCURRENT_TRANSACTIONS until done). v3+ carry the producer's own id
and epoch to bump (KIP-360); PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4.

Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without
one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), else
CLUSTER_AUTHORIZATION_FAILED (Kafka's KafkaApis.handleInitProducerIdRequest).
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.transaction_coordinator import client_code
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 22
VERSIONS = (0, 5)

log = logging.getLogger("chronik.producer_ids")


def _refused(ctx: RequestContext, code: int) -> Any:
    return ctx.build(
        "InitProducerIdResponse",
        throttle_time=0,
        error_code=code,
        producer_id=-1,
        producer_epoch=-1,
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        txn_id = request.transactional_id
        if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
            return _refused(ctx, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return await _transactional(ctx, request)
    if not ctx.allowed_on_cluster(Operation.IDEMPOTENT_WRITE) and not ctx.allowed_on_any(
        Operation.WRITE, ResourceType.TOPIC
    ):
        return _refused(ctx, errors.CLUSTER_AUTHORIZATION_FAILED)
    cluster = ctx.services.cluster
    if cluster is None:
        producer_id = ctx.services.producer_ids.allocate()
    else:
        try:
            producer_id = await cluster.allocate_producer_id()
        except Exception as exc:  # ZooKeeper unreachable: the client retries
            log.debug("no producer id block from ZooKeeper: %s", exc)
            return ctx.build(
                "InitProducerIdResponse",
                throttle_time=0,
                error_code=errors.COORDINATOR_NOT_AVAILABLE,
                producer_id=-1,
                producer_epoch=-1,
            )
    return ctx.build(
        "InitProducerIdResponse",
        throttle_time=0,
        error_code=errors.NONE,
        producer_id=producer_id,
        producer_epoch=0,
    )


async def _transactional(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.txn_coordinator
    if not request.transactional_id:
        code, pid, epoch = errors.INVALID_REQUEST, -1, -1
    elif coordinator is None:
        code, pid, epoch = errors.COORDINATOR_NOT_AVAILABLE, -1, -1
    else:
        code, pid, epoch = await coordinator.init_producer_id(
            request.transactional_id,
            millis(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
    return ctx.build(
        "InitProducerIdResponse",
        throttle_time=0,
        error_code=client_code(code, ctx.api_version, 4),
        producer_id=pid,
        producer_epoch=epoch,
    )
