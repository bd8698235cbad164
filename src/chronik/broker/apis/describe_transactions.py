"""DescribeTransactions (API key 65), version 0.

The coordinator's state of each transactional id it serves: state (Kafka's names),
timeout, start time, producer id and epoch, and the partitions of the open transaction.
An id served elsewhere gets NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS), an
unknown one TRANSACTIONAL_ID_NOT_FOUND.

Needs DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
it); the partitions of topics the principal may not DESCRIBE are left out (Kafka's
KafkaApis.handleDescribeTransactionsRequest).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode as E

from chronik.broker.context import RequestContext
from chronik.coordinator.transaction_state import TxnState
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 65
VERSIONS = (0, 0)

_NOT_FOUND = int(E.transactional_id_not_found)
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _state(ctx: RequestContext, txn_id: str, code: int, txn: Any = None) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions if txn is not None else ()):
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic):
            continue
        by_topic.setdefault(topic, []).append(partition)
    start_ms = txn.txn_start_ms if txn is not None else -1
    return ctx.build(
        "TransactionState",
        error_code=code,
        transactional_id=txn_id,
        transaction_state=txn.state.kafka_name if txn is not None else "",
        transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms if txn else 0),
        transaction_start_time=_EPOCH + datetime.timedelta(milliseconds=start_ms),
        producer_id=txn.producer_id if txn is not None else -1,
        producer_epoch=txn.producer_epoch if txn is not None else -1,
        topics=tuple(
            ctx.build("TopicData", topic=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.txn_coordinator
    states = []
    for txn_id in request.transactional_ids:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            states.append(_state(ctx, txn_id, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        code = coordinator.coordinator_error(txn_id)
        txn = coordinator.txns.get(txn_id) if code is None else None
        if code is not None:
            states.append(_state(ctx, txn_id, code))
        elif txn is None or txn.state is TxnState.DEAD:
            states.append(_state(ctx, txn_id, _NOT_FOUND))
        else:
            states.append(_state(ctx, txn_id, 0, txn))
    return ctx.build(
        "DescribeTransactionsResponse", throttle_time=0, transaction_states=tuple(states)
    )
