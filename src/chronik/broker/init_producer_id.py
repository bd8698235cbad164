"""InitProducerId (API key 22), versions 0-5, for idempotent producers.

A producer without a transactional id always gets a fresh producer id with
epoch 0, as Kafka does. Transactions are not supported: a transactional id is
refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients treat as fatal.
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors

API_KEY = 22
VERSIONS = (0, 5)

log = logging.getLogger("chronik.producer_ids")


async def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        log.warning(
            "refusing transactional producer %r from %s: transactions are not supported",
            request.transactional_id,
            ctx.client_id,
        )
        return ctx.build(
            "InitProducerIdResponse",
            throttle_time=0,
            error_code=errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    cluster = ctx.broker.cluster
    if cluster is None:
        producer_id = ctx.broker.producer_ids.allocate()
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
