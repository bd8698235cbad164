"""The coordinator's write of a transaction's completion, once its markers are written:
retried with back-off for as long as the coordinator holds the transaction's partition
(well past the 50 attempts it used to give up after), with one line when it starts
failing and one when it ends; given up only when the partition goes to another broker."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from chronik.coordinator import transaction_coordinator as tc
from chronik.coordinator.transaction_state import TxnMetadata, TxnState
from chronik.coordinator.transaction_topic import StoreError

FAILURES = 120  # more than the attempts the coordinator used to make


class _Broker:
    cluster = None
    catalog = SimpleNamespace(get=lambda name: None)
    config = SimpleNamespace(values={})

    @staticmethod
    def now_ms() -> int:
        return 1_000


def _coordinator(monkeypatch: pytest.MonkeyPatch, fail: int) -> tuple[Any, list[bytes | None]]:
    monkeypatch.setattr(tc, "COMPLETE_RETRY_FIRST_SECONDS", 0.001, raising=False)
    monkeypatch.setattr(tc, "COMPLETE_RETRY_MAX_SECONDS", 0.002, raising=False)
    coordinator = tc.TransactionCoordinator(_Broker(), tc.MarkerSender(None, None))  # type: ignore[arg-type]
    written: list[bytes | None] = []
    failures = [fail]

    async def write(partition: int, key: bytes, value: bytes | None) -> None:
        if failures[0] != 0:
            failures[0] -= 1
            raise StoreError(15, "not enough in-sync replicas")
        written.append(value)

    monkeypatch.setattr(coordinator.topic, "write", write)
    return coordinator, written


def _prepared(coordinator: Any) -> tuple[TxnMetadata, int]:
    txn = TxnMetadata("wedge", 7, 0, TxnState.PREPARE_COMMIT, 60_000, 500, 900)
    partition = coordinator.topic.partition_of(txn.transactional_id)
    coordinator._loaded.add(partition)
    coordinator.txns[txn.transactional_id] = txn
    txn.pending = True
    return txn, partition


def test_completion_retried_until_written(monkeypatch, caplog):
    coordinator, written = _coordinator(monkeypatch, FAILURES)
    txn, partition = _prepared(coordinator)
    with caplog.at_level(logging.INFO, "chronik.transactions"):
        asyncio.run(coordinator._finish(txn, True, partition))
    now = coordinator.txns["wedge"]
    assert now.state == TxnState.COMPLETE_COMMIT and not now.pending
    assert len(written) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "completion not stored" in lines[0]
    assert f"completion stored after {FAILURES} failed attempts" in lines[1]


def test_completion_given_up_when_the_partition_moves(monkeypatch, caplog):
    coordinator, written = _coordinator(monkeypatch, -1)  # never written
    txn, partition = _prepared(coordinator)

    async def scenario() -> None:
        finishing = asyncio.ensure_future(coordinator._finish(txn, True, partition))
        await asyncio.sleep(0.5)
        assert not finishing.done()
        coordinator.unload_partition(partition)  # another broker leads it now
        await asyncio.wait_for(finishing, 5)

    with caplog.at_level(logging.INFO, "chronik.transactions"):
        asyncio.run(scenario())
    assert written == []
    assert not txn.pending
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "left to the next coordinator" in lines[1]
