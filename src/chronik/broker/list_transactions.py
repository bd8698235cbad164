"""ListTransactions (API key 66), versions 0-1.

The transactional ids this broker's coordinator serves (in a cluster, those of the
__transaction_state partitions it leads; a client asks every broker), filtered by state
names (Kafka's: Empty, Ongoing, PrepareCommit, ...; names it does not know come back in
unknown_state_filters), by producer ids, and (v1) by running longer than
duration_filter ms.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.transaction_state import TxnState

API_KEY = 66
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.txn_coordinator
    states = set(request.state_filters)
    unknown = tuple(s for s in request.state_filters if TxnState.from_name(s) is None)
    pids = set(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    now = ctx.broker.now_ms()
    code = coordinator.listing_error()
    listed = []
    if code == 0:
        for txn in sorted(coordinator.transactions(), key=lambda t: t.transactional_id):
            # Kafka's TransactionStateManager.listTransactionStates filters.
            if txn.state is TxnState.DEAD:
                continue
            if states and txn.state.kafka_name not in states:
                continue
            if pids and txn.producer_id not in pids:
                continue
            if duration >= 0 and now - txn.txn_start_ms <= duration:
                continue
            listed.append(
                ctx.build(
                    "TransactionState",
                    transactional_id=txn.transactional_id,
                    producer_id=txn.producer_id,
                    transaction_state=txn.state.kafka_name,
                )
            )
    return ctx.build(
        "ListTransactionsResponse",
        throttle_time=0,
        error_code=code,
        unknown_state_filters=unknown,
        transaction_states=tuple(listed),
    )
