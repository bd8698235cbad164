"""ListTransactions (API key 66), versions 0-1.

The transactional ids this broker's coordinator serves (in a cluster, those of the
__transaction_state partitions it leads; a client asks every broker), filtered by state
names (Kafka's: Empty, Ongoing, PrepareCommit, ...; names it does not know come back in
unknown_state_filters), by producer ids, and (v1) by running longer than
duration_filter ms. Only the transactional ids the principal may DESCRIBE are listed
(Kafka's KafkaApis.handleListTransactionsRequest).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from chronik.broker.context import RequestContext
from chronik.coordinator.transaction_state import TxnMetadata, TxnState
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 66
VERSIONS = (0, 1)


def select(
    transactions: Iterable[TxnMetadata],
    state_filters: Sequence[str],
    producer_id_filters: Iterable[int],
    duration_filter: int,
    now_ms: int,
) -> tuple[list[TxnMetadata], tuple[str, ...]]:
    """The transactions a ListTransactions request asks for, by id, and the state names
    it gave that are no state's; Kafka's TransactionStateManager.listTransactionStates:
    Dead ids are never listed, each non-empty filter must match, and a duration filter
    keeps only transactions started more than that many ms ago."""
    states = {s for s in (TxnState.from_name(n) for n in state_filters) if s is not None}
    unknown = tuple(n for n in state_filters if TxnState.from_name(n) is None)
    pids = set(producer_id_filters)
    chosen = []
    for txn in transactions:
        if txn.state is TxnState.DEAD:
            continue
        if state_filters and txn.state not in states:
            continue
        if pids and txn.producer_id not in pids:
            continue
        if duration_filter >= 0 and now_ms - txn.txn_start_ms <= duration_filter:
            continue
        chosen.append(txn)
    return sorted(chosen, key=lambda t: t.transactional_id), unknown


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.txn_coordinator
    code = coordinator.listing_error()
    listed: list[TxnMetadata] = []
    unknown: tuple[str, ...] = ()
    # While a partition loads Kafka answers the error alone, without the unknown names.
    if code == 0:
        listed, unknown = select(
            coordinator.transactions(),
            tuple(request.state_filters),
            request.producer_id_filters,
            getattr(request, "duration_filter", -1),
            ctx.services.now_ms(),
        )
        listed = [
            t
            for t in listed
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
        ]
    return ctx.build(
        "ListTransactionsResponse",
        throttle_time=0,
        error_code=code,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            ctx.build(
                "TransactionState",
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                transaction_state=txn.state.kafka_name,
            )
            for txn in listed
        ),
    )
