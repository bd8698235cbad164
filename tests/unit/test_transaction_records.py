"""The transaction coordinator's records (Kafka's TransactionLogKey/Value v0) and the
group side of transactions: offsets held until their transaction's marker, live and on
replay, driven directly with an in-memory store."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.coordinator.committed_offsets import CommitRequest
from chronik.coordinator.group_coordinator import GroupCoordinator
from chronik.coordinator.transaction_log import (
    InvalidTxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from chronik.coordinator.transaction_state import TxnMetadata, TxnState
from chronik.records.control import ABORT, COMMIT

UNSTABLE_OFFSET_COMMIT = 88
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22


# --- __transaction_state records ----------------------------------------------------


def test_value_bytes_are_kafkas_v0_layout():
    txn = TxnMetadata("tid", 4000, 3, TxnState.ONGOING, 60000, 1700, 1800, {("t", 1), ("t", 0)})
    expected = (
        struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
        + struct.pack(">i", 1)  # one topic
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1800, 1700)  # last update, then start
    )
    assert encode_value(txn) == expected
    assert encode_key("tid") == struct.pack(">hh", 0, 3) + b"tid"


@given(
    st.text(max_size=20),
    st.integers(0, 2**63 - 1),
    st.integers(-1, 2**15 - 1),
    st.integers(1, 2**31 - 1),
    st.sampled_from(list(TxnState)),
    st.sets(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 1000)), max_size=8),
    st.integers(-1, 2**62),
    st.integers(-1, 2**62),
)
def test_records_round_trip(tid, pid, epoch, timeout, state, partitions, start, update):
    txn = TxnMetadata(tid, pid, epoch, state, timeout, start, update, partitions)
    assert decode_key(encode_key(tid)) == tid
    back = decode_value(tid, encode_value(txn))
    assert (back.producer_id, back.producer_epoch, back.state, back.timeout_ms) == (
        pid,
        epoch,
        state,
        timeout,
    )
    assert (back.txn_start_ms, back.last_update_ms, back.partitions) == (start, update, partitions)


@given(st.binary(max_size=80))
def test_garbage_is_refused_not_crashed_on(data):
    for decode in (decode_key, lambda d: decode_value("x", d)):
        with contextlib.suppress(InvalidTxnRecord):
            decode(data)


# --- the group side ------------------------------------------------------------------


class TxnMemoryStore:
    """__consumer_offsets in memory, replayed as OffsetsTopic replays it: (key, value,
    position, producer_id, marker)."""

    def __init__(self):
        self.records = []

    async def replay(self):
        return [(*r, i) if len(r) == 2 else r for i, r in enumerate(self.records)]

    async def write(self, group_id, records, producer_id=-1, producer_epoch=-1):
        await asyncio.sleep(0)
        for key, value in records:
            self.records.append((key, value, len(self.records), producer_id, None))
        return len(self.records) - 1

    def marker(self, producer_id, commit):
        self.records.append(
            (b"", None, len(self.records), producer_id, COMMIT if commit else ABORT)
        )


class FakeBroker:
    config = {"group.min.session.timeout.ms": "10", "group.initial.rebalance.delay.ms": "0"}


def coordinator(store):
    return GroupCoordinator(FakeBroker(), store, {"t": 4}.get)


def commit(offset, partition=0):
    return [CommitRequest("t", partition, offset, -1, "")]


def offset(c, stable=False, partition=0):
    code, (fetched,) = c.fetch_offsets("g", [("t", [partition])], stable)
    assert code == 0
    return fetched.error or fetched.offset


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_transactional_offsets_wait_for_the_commit():
    async def scenario():
        c = coordinator(TxnMemoryStore())
        assert await c.txn_commit_offsets("g", 7, 0, -1, "", None, commit(5)) == [0]
        assert offset(c) == -1
        assert offset(c, stable=True) == UNSTABLE_OFFSET_COMMIT
        c.complete_transaction(0, 7, commit=True)
        assert offset(c) == offset(c, stable=True) == 5

    run(scenario())


def test_an_abort_drops_them_and_a_later_plain_commit_wins():
    async def scenario():
        c = coordinator(TxnMemoryStore())
        await c.commit_offsets("g", -1, "", None, commit(2))
        await c.txn_commit_offsets("g", 7, 0, -1, "", None, commit(5))
        c.complete_transaction(0, 7, commit=False)
        assert offset(c, stable=True) == 2
        await c.txn_commit_offsets("g", 8, 0, -1, "", None, commit(6))
        await c.commit_offsets("g", -1, "", None, commit(9))  # written after the txn's
        c.complete_transaction(0, 8, commit=True)
        assert offset(c) == 9

    run(scenario())


def test_a_member_id_or_generation_given_must_match():
    async def scenario():
        c = coordinator(TxnMemoryStore())
        assert await c.txn_commit_offsets("g", 7, 0, -1, "nobody", None, commit(1)) == [
            UNKNOWN_MEMBER_ID
        ]
        assert await c.txn_commit_offsets("g", 7, 0, 3, "", None, commit(1)) == [ILLEGAL_GENERATION]

    run(scenario())


def test_a_failed_write_leaves_nothing_pending():
    class Failing(TxnMemoryStore):
        async def write(self, *args, **kwargs):
            raise OSError("disk gone")

    async def scenario():
        c = coordinator(Failing())
        codes = await c.txn_commit_offsets("g", 7, 0, -1, "", None, commit(5))
        assert codes[0] != 0
        assert offset(c, stable=True) == -1

    run(scenario())


@pytest.mark.parametrize("ending", [COMMIT, ABORT, None])
def test_replay_resolves_transactions_at_their_markers(ending):
    async def scenario():
        store = TxnMemoryStore()
        first = coordinator(store)
        await first.commit_offsets("g", -1, "", None, commit(1))
        await first.txn_commit_offsets("g", 7, 0, -1, "", None, commit(4))
        await first.txn_commit_offsets("g", 9, 0, -1, "", None, commit(3, partition=1))
        store.marker(9, commit=True)
        if ending is not None:
            store.marker(7, commit=ending == COMMIT)
        again = coordinator(store)
        await again.start()
        assert offset(again, partition=1) == 3
        if ending == COMMIT:
            assert offset(again, stable=True) == 4
        elif ending == ABORT:
            assert offset(again, stable=True) == 1
        else:
            # Still open after the restart: pending until the coordinator ends it.
            assert offset(again) == 1
            assert offset(again, stable=True) == UNSTABLE_OFFSET_COMMIT
            again.complete_transaction(0, 7, commit=True)
            assert offset(again, stable=True) == 4
        await again.stop()

    run(scenario())
