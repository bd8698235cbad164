"""Requests the transaction coordinator holds while a transactional id is busy: the next
transaction's AddPartitionsToTxn, sent while the previous one's markers are being
written, is answered once they are durable (its Ongoing state written in one batch with
the completion) instead of CONCURRENT_TRANSACTIONS; a request still waiting after
SETTLE_WAIT_SECONDS gets CONCURRENT_TRANSACTIONS; an InitProducerId that fences an open
transaction is answered once its abort is written. The completion after the producer's
own EndTxn reserves the transaction's partitions for the next one (an Ongoing record in
the same write): a next AddPartitionsToTxn within them is answered without a write, and
an unused reservation is given back by storing the completion again."""

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
        self.last: Any = None  # the last record written, decoded
        self.fail = fail

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        await self.write_many(partition, [(key, value)])

    async def write_many(self, partition: int, records: list[tuple[bytes, bytes | None]]):
        await asyncio.sleep(0)
        if self.fail:
            self.fail -= 1
            raise StoreError(15, "not enough in-sync replicas")
        self.batches.append([decode_value(TXN, v).state for _, v in records if v is not None])
        if records and records[-1][1] is not None:
            self.last = decode_value(TXN, records[-1][1])


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


def test_completion_reserves_the_partitions_for_the_next_transaction(monkeypatch):
    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        written = len(store.batches)
        markers.release.set()
        await asyncio.sleep(0.05)
        # Written at once after the markers: the completion, and an Ongoing record for
        # the same producer naming the partitions of the transaction just committed.
        assert store.batches[written:] == [[TxnState.COMPLETE_COMMIT, TxnState.ONGOING]]
        assert store.last.partitions == {("t", 0)}
        assert (store.last.producer_id, store.last.producer_epoch) == (pid, epoch)
        txn = coordinator.txns[TXN]
        assert txn.state == TxnState.COMPLETE_COMMIT and txn.reserved == {("t", 0)}
        # Not a transaction here: no timeout aborts it.
        assert coordinator.abort_timed_out(10**12) == 0
        # The next transaction on the same partition: answered with no write.
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
        assert len(store.batches) == written + 1
        now = coordinator.txns[TXN]
        assert now.state == TxnState.ONGOING and now.partitions == {("t", 0)}
        # A partition outside the reservation is stored before it is answered.
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 1)]) == NONE
        assert store.batches[-1] == [TxnState.ONGOING]
        assert store.last.partitions == {("t", 0), ("t", 1)}
        # Its markers go to the partitions of this transaction only.
        assert await coordinator.end_transaction(TXN, pid, epoch, True) == NONE
        await asyncio.sleep(0.05)
        assert sorted(markers.sent[-1][3]) == [("t", 0), ("t", 1)]

    asyncio.run(scenario())


def test_reserved_partitions_are_not_a_reason_to_skip_a_fence(monkeypatch):
    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        markers.release.set()
        await asyncio.sleep(0.05)
        # A new producer of the id bumps the epoch: the reservation is gone with it.
        code, _, new_epoch = await coordinator.init_producer_id(TXN, 60_000)
        assert (code, new_epoch) == (NONE, epoch + 1)
        assert store.last.state == TxnState.EMPTY
        assert coordinator.txns[TXN].reserved is None
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == (
            tc.PRODUCER_FENCED
        )
        assert await coordinator.add_partitions(TXN, pid, new_epoch, [("t", 0)]) == NONE
        assert store.batches[-1] == [TxnState.ONGOING]

    asyncio.run(scenario())


def test_unused_reservation_is_given_back(monkeypatch):
    monkeypatch.setattr(tc, "RESERVATION_SECONDS", 0.05)

    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        markers.release.set()
        await asyncio.sleep(0.3)
        # The completion stored again, alone: a coordinator loading the id finds no
        # transaction under way.
        assert store.batches[-2:] == [
            [TxnState.COMPLETE_COMMIT, TxnState.ONGOING], [TxnState.COMPLETE_COMMIT]
        ]
        txn = coordinator.txns[TXN]
        assert txn.state == TxnState.COMPLETE_COMMIT and txn.reserved is None
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
        assert store.batches[-1] == [TxnState.ONGOING]

    asyncio.run(scenario())


def test_reservation_not_given_back_is_tried_again(monkeypatch):
    monkeypatch.setattr(tc, "RESERVATION_SECONDS", 0.05)

    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        await _committing(coordinator)
        markers.release.set()
        await asyncio.sleep(0.01)
        store.fail = 1  # the first giving back is not stored
        await asyncio.sleep(0.3)
        assert store.batches[-1] == [TxnState.COMPLETE_COMMIT]
        assert coordinator.txns[TXN].reserved is None

    asyncio.run(scenario())


def test_used_reservation_is_not_given_back(monkeypatch):
    monkeypatch.setattr(tc, "RESERVATION_SECONDS", 0.05)

    async def scenario() -> None:
        store = _Store()
        coordinator, markers = await _coordinator(monkeypatch, store)
        pid, epoch = await _committing(coordinator)
        markers.release.set()
        await asyncio.sleep(0.01)
        assert await coordinator.add_partitions(TXN, pid, epoch, [("t", 0)]) == NONE
        written = len(store.batches)
        await asyncio.sleep(0.2)
        assert len(store.batches) == written
        assert coordinator.txns[TXN].state == TxnState.ONGOING

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
