"""Requests the transaction coordinator holds while a transactional id is busy, instead of
answering CONCURRENT_TRANSACTIONS at once.

A producer starts its next transaction as soon as EndTxn is answered, while the
coordinator is still writing the markers and the completion of the previous one. Kafka
answers its AddPartitionsToTxn CONCURRENT_TRANSACTIONS and the client backs off
(librdkafka 20 ms, the Java client up to 100 ms) for what takes about a millisecond;
Kafka 4 removes the wait with an epoch bump per transaction (KIP-890 part 2), which these
clients do not speak. Here such a request waits until the id settles, for at most
SETTLE_WAIT_SECONDS, then looks again (and gets CONCURRENT_TRANSACTIONS only if the id is
still busy).

An AddPartitionsToTxn (or AddOffsetsToTxn) that arrives while the markers are being
written goes further: it is queued as the id's next transaction, and the coordinator
writes its Ongoing state in the same batch as the previous transaction's completion, one
append and one fsync for both, and answers it when that batch is durable. (One that
arrives after the completion usually finds its partitions reserved by that write and is
answered at once: chronik.coordinator.transaction_coordinator.)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode as E

# Well under every client's request timeout (librdkafka 60 s, Java 30 s).
SETTLE_WAIT_SECONDS = 5.0

Partition = tuple[str, int]
CONCURRENT_TRANSACTIONS = int(E.concurrent_transactions)


@dataclass
class NextTransaction:
    """A held AddPartitionsToTxn: the partitions of the producer's next transaction."""

    producer_id: int
    producer_epoch: int
    partitions: set[Partition]
    # The request's error code once its Ongoing state is written with the completion;
    # None: not written that way, the request looks at the id again.
    answer: asyncio.Future[int | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def resolve(self, code: int | None) -> None:
        if not self.answer.done():  # done: answered, or its request gave up
            self.answer.set_result(code)


class HeldRequests:
    def __init__(self) -> None:
        self._settling: dict[str, asyncio.Future[None]] = {}
        self._next: dict[str, NextTransaction] = {}
        self.open = True

    @staticmethod
    def deadline() -> float:
        return asyncio.get_running_loop().time() + SETTLE_WAIT_SECONDS

    def settled(self, txn_id: str) -> None:
        """The id is no longer busy (or no longer served here): every request held for it
        looks again."""
        waiter = self._settling.pop(txn_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        queued = self._next.pop(txn_id, None)
        if queued is not None:
            queued.resolve(None)

    def close(self) -> None:
        self.open = False
        for txn_id in {*self._settling, *self._next}:
            self.settled(txn_id)

    async def until_settled(self, txn_id: str, deadline: float) -> bool:
        """Wait until the id is no longer busy; False once ``deadline`` (loop time) has
        passed or the coordinator stops."""
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0 or not self.open:
            return False
        waiter = self._settling.get(txn_id)
        if waiter is None:
            waiter = self._settling[txn_id] = loop.create_future()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), remaining)
        except TimeoutError:
            return False
        return self.open

    def has_next(self, txn_id: str) -> bool:
        return txn_id in self._next

    async def queue_next(
        self, txn_id: str, producer_id: int, epoch: int, partitions: set[Partition],
        deadline: float,
    ) -> int | None:
        """Queue the id's next transaction to be written with the current one's
        completion. Its error code if it was; None to look again; CONCURRENT_TRANSACTIONS
        once ``deadline`` has passed."""
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0 or not self.open:
            return CONCURRENT_TRANSACTIONS
        queued = NextTransaction(producer_id, epoch, partitions)
        self._next[txn_id] = queued
        try:
            return await asyncio.wait_for(asyncio.shield(queued.answer), remaining)
        except TimeoutError:
            return CONCURRENT_TRANSACTIONS
        finally:
            # Given up (a timeout, a closed connection) before the completion took it.
            queued.answer.cancel()
            if self._next.get(txn_id) is queued:
                del self._next[txn_id]

    def take_next(self, txn_id: str) -> NextTransaction | None:
        """The queued next transaction, now written with the completion (or not)."""
        queued = self._next.pop(txn_id, None)
        if queued is not None and queued.answer.done():  # its request gave up
            return None
        return queued
