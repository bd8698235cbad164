"""ListTransactions' filters (Kafka's TransactionStateManager.listTransactionStates)."""

from __future__ import annotations

from chronik.broker.apis.list_transactions import select
from chronik.coordinator.transaction_state import TxnMetadata, TxnState

NOW = 1_000_000


def txn(txn_id: str, pid: int, state: TxnState, start_ms: int = -1) -> TxnMetadata:
    return TxnMetadata(txn_id, pid, 0, state, 60_000, start_ms, start_ms, set())


TXNS = [
    txn("c-ongoing-old", 3, TxnState.ONGOING, NOW - 50_000),
    txn("a-empty", 1, TxnState.EMPTY),
    txn("b-ongoing-new", 2, TxnState.ONGOING, NOW - 10),
    txn("d-dead", 4, TxnState.DEAD),
    txn("e-committed", 5, TxnState.COMPLETE_COMMIT, NOW - 70_000),
]


def ids(*args: object) -> list[str]:
    chosen, _ = select(TXNS, *args, NOW)  # type: ignore[arg-type]
    return [t.transactional_id for t in chosen]


def test_no_filter_lists_all_but_dead_ids_sorted():
    assert ids((), (), -1) == ["a-empty", "b-ongoing-new", "c-ongoing-old", "e-committed"]


def test_state_and_producer_id_filters_must_both_match():
    assert ids(("Ongoing",), (), -1) == ["b-ongoing-new", "c-ongoing-old"]
    assert ids(("Ongoing", "Empty"), (3, 1), -1) == ["a-empty", "c-ongoing-old"]
    assert ids((), (5,), -1) == ["e-committed"]
    assert ids(("Dead",), (), -1) == []


def test_unknown_state_names_are_answered_and_match_nothing():
    chosen, unknown = select(TXNS, ("Sleeping", "Ongoing", "ongoing"), (), -1, NOW)
    assert unknown == ("Sleeping", "ongoing")
    assert [t.transactional_id for t in chosen] == ["b-ongoing-new", "c-ongoing-old"]
    chosen, unknown = select(TXNS, ("Sleeping",), (), -1, NOW)
    assert (chosen, unknown) == ([], ("Sleeping",))


def test_duration_keeps_transactions_older_than_it():
    # Kafka compares now - start with the filter, so an id with no start time (-1)
    # counts as very old.
    assert ids(("Ongoing",), (), 10_000) == ["c-ongoing-old"]
    assert ids(("Ongoing",), (), 10) == ["c-ongoing-old"]
    assert ids(("Ongoing",), (), 9) == ["b-ongoing-new", "c-ongoing-old"]
    assert ids((), (), 60_000) == ["a-empty", "e-committed"]
