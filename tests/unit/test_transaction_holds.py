"""Requests the transaction coordinator holds while a transactional id is busy: the next
transaction's AddPartitionsToTxn, sent while the previous one's markers are being
written, is answered once they are durable (its Ongoing state written in one batch with
the completion) instead of CONCURRENT_TRANSACTIONS; a request still waiting after
SETTLE_WAIT_SECONDS gets CONCURRENT_TRANSACTIONS; an InitProducerId that fences an open
transaction is answered once its abort is written."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from chronik.coordinator import transaction_coordinator as tc
from chronik.coordinator import transaction_holds
from chronik.coordinator.transaction_log import decode_value
from chronik.coordinator.transaction_state import TxnState
from chronik.coordinator.transaction_topic import StoreError

TXN = "holds"
NONE = tc.NONE


class _Broker:
    cluster = None
    catalog = SimpleNamespace(get=lambda name: None)
    config = SimpleNamespace(values={})
    producer_ids = SimpleNamespace(allocate=lambda: 42)

    @staticmethod
    def now_ms() -> int:
        return 1_000


class _Markers:
    """A marker sender whose rounds finish when the test says so."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sent: list[tuple[int, int, bool, list[Any]]] = []

    async def send(self, pid, epoch, coordinator_epoch, commit, partitions, still_coordinating):
        self.sent.append((pid, epoch, commit, partitions))
        await self.release.wait()
        return True

    async def close(self) -> None:
        pass


class _Store:
    """The coordinator's writes, each a batch of states; ``fail`` failures first."""

    def __init__(self, fail: int = 0) -> None:
        self.batches: list[list[TxnState]] = []
        self.fail = fail

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        await self.write_many(partition, [(key, value)])

    async def write_many(self, partition: int, records: list[tuple[bytes, bytes | None]]):
        await asyncio.sleep(0)
        if self.fail:
            self.fail -= 1
            raise StoreError(15, "not enough in-sync replicas")
        self.batches.append([decode_value(TXN, v).state for _, v in records if v is not None])


async def _coordinator(monkeypatch: pytest.MonkeyPatch, store: _Store) -> tuple[Any, _Markers]:
    monkeypatch.setattr(tc, "COMPLETE_RETRY_FIRST_SECONDS", 0.001)
    markers = _Markers()
    coordinator = tc.TransactionCoordinator(_Broker(), markers)  # type: ignore[arg-type]
    monkeypatch.setattr(coordinator.topic, "write", store.write)
    monkeypatch.setattr(coordinator.topic, "write_many", store.write_many)
    coordinator._loaded.add(coordinator.topic.partition_of(TXN))
    coordinator._running = True
    return coordinator, markers


async def _committing(coordinator: Any) -> tuple[int, int]:
    """An id whose first transaction (on t-0) has had EndTxn(commit) answered; its markers
    are being written."""
    code, pid, epoch = await coordinator.init_producer_id(TXN, 60_000)
    assert code == NONE
    assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
    assert await coordinator.end_transaction(TXN, pid, epoch, True) == NONE
    assert coordinator.txns[TXN].state == TxnState.PREPARE_COMMIT
    return pid, epoch


def test_next_transaction_waits_for_the_markers_and_shares_the_completion_write(monkeypatch):
    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        adding = asyncio.ensure_future(coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]))
        await asyncio.sleep(0.05)
        assert not adding.done()  # held, not answered CONCURRENT_TRANSACTIONS
        written = len(store.batches)
        markers.release.set()
        assert await asyncio.wait_for(adding, 5) == NONE
        # One write after the markers: the completion and the next transaction together.
        assert store.batches[written:] == [[TxnState.COMPLETE_COMMIT, TxnState.ONGOING]]
        now = coordinator.txns[TXN]
        assert now.state == TxnState.ONGOING and now.partitions == {("t", 1)}
        assert not now.pending

    asyncio.run(scenario())


def test_request_soon_after_the_markers_shares_the_completion_write(monkeypatch):
    monkeypatch.setattr(transaction_holds, "NEXT_WAIT_SECONDS", 5.0)

    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        written = len(store.batches)
        markers.release.set()
        await asyncio.sleep(0.05)  # the markers are written; the completion waits
        assert len(store.batches) == written
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]) == NONE
        assert store.batches[written:] == [[TxnState.COMPLETE_COMMIT, TxnState.ONGOING]]

    asyncio.run(scenario())


def test_request_arriving_after_the_completion_writes_on_its_own(monkeypatch):
    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        markers.release.set()
        await asyncio.sleep(transaction_holds.NEXT_WAIT_SECONDS + 0.05)
        assert coordinator.txns[TXN].state == TxnState.COMPLETE_COMMIT
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]) == NONE
        assert store.batches[-2:] == [[TxnState.COMPLETE_COMMIT], [TxnState.ONGOING]]

    asyncio.run(scenario())


def test_held_request_gets_concurrent_transactions_after_the_wait(monkeypatch):
    monkeypatch.setattr(transaction_holds, "SETTLE_WAIT_SECONDS", 0.1)

    async def scenario() -> None:
        coordinator, markers = await _coordinator(monkeypatch, _Store())
        pid, epoch = await _committing(coordinator)
        started = asyncio.get_running_loop().time()
        code = await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)])
        assert code == tc.CONCURRENT_TRANSACTIONS
        assert asyncio.get_running_loop().time() - started >= 0.1
        # A retried EndTxn is held the same way.
        assert await coordinator.end_transaction(TXN, pid, epoch, True) == (
            tc.CONCURRENT_TRANSACTIONS
        )
        markers.release.set()
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]) == NONE
        assert coordinator.txns[TXN].state == TxnState.ONGOING

    asyncio.run(scenario())


def test_retried_end_txn_is_answered_once_the_markers_are_written(monkeypatch):
    async def scenario() -> None:
        coordinator, markers = await _coordinator(monkeypatch, _Store())
        pid, epoch = await _committing(coordinator)
        retry = asyncio.ensure_future(coordinator.end_transaction(TXN, pid, epoch, True))
        await asyncio.sleep(0.05)
        assert not retry.done()
        markers.release.set()
        assert await asyncio.wait_for(retry, 5) == NONE
        assert coordinator.txns[TXN].state == TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_fencing_init_producer_id_waits_for_the_abort(monkeypatch):
    async def scenario() -> None:
        coordinator, markers = await _coordinator(monkeypatch, _Store())
        code, pid, epoch = await coordinator.init_producer_id(TXN, 60_000)
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
        # A new producer of the id aborts the open transaction with a bumped epoch and
        # is answered once that abort is done, not told to retry.
        fencing = asyncio.ensure_future(coordinator.init_producer_id(TXN, 60_000))
        await asyncio.sleep(0.05)
        assert coordinator.txns[TXN].state == TxnState.PREPARE_ABORT
        assert not fencing.done()
        # The old producer is fenced at once.
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]) == (
            tc.PRODUCER_FENCED
        )
        markers.release.set()
        code, new_pid, new_epoch = await asyncio.wait_for(fencing, 5)
        assert (code, new_pid, new_epoch) == (NONE, pid, epoch + 2)
        assert markers.sent[-1][1:3] == (epoch + 1, False)
        assert coordinator.txns[TXN].state == TxnState.EMPTY

    asyncio.run(scenario())


def test_shared_write_failing_falls_back_to_separate_writes(monkeypatch):
    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        adding = asyncio.ensure_future(coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]))
        await asyncio.sleep(0.05)
        store.fail = 1  # the shared write fails; the completion is retried alone
        markers.release.set()
        assert await asyncio.wait_for(adding, 5) == NONE
        assert store.batches[-2:] == [[TxnState.COMPLETE_COMMIT], [TxnState.ONGOING]]
        assert coordinator.txns[TXN].state == TxnState.ONGOING

    asyncio.run(scenario())


def test_stopping_releases_held_requests(monkeypatch):
    async def scenario() -> None:
        coordinator, _ = await _coordinator(monkeypatch, _Store())
        pid, epoch = await _committing(coordinator)
        adding = asyncio.ensure_future(coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]))
        await asyncio.sleep(0.05)
        await coordinator.stop()
        assert await asyncio.wait_for(adding, 5) == tc.CONCURRENT_TRANSACTIONS

    asyncio.run(scenario())


def test_stale_epoch_bump_is_fenced_without_aborting_the_open_transaction(monkeypatch):
    async def scenario() -> None:
        coordinator, markers = await _coordinator(monkeypatch, _Store())
        code, pid, epoch = await coordinator.init_producer_id(TXN, 60_000)
        code, pid, epoch = await coordinator.init_producer_id(TXN, 60_000, pid, epoch)
        assert code == NONE
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
        # KIP-360: a zombie naming the epoch before the current one is fenced, and the
        # current producer's transaction stays open.
        assert await coordinator.init_producer_id(TXN, 60_000, pid, epoch - 1) == (
            tc.PRODUCER_FENCED, -1, -1
        )
        assert coordinator.txns[TXN].state == TxnState.ONGOING and markers.sent == []
        # The current producer bumping its own epoch aborts its transaction and gets
        # the epoch after the abort's.
        bumping = asyncio.ensure_future(coordinator.init_producer_id(TXN, 60_000, pid, epoch))
        await asyncio.sleep(0.05)
        markers.release.set()
        assert await asyncio.wait_for(bumping, 5) == (NONE, pid, epoch + 2)

    asyncio.run(scenario())
