"""The transaction coordinator, as Kafka's TransactionCoordinator and
TransactionStateManager: one per broker, serving the transactional ids whose
__transaction_state partition this broker leads (a single node: all of them).

Every change of a transaction's state is written to __transaction_state and durable
before it is answered or acted on. EndTxn (and an abort after a timeout or a fencing
InitProducerId) writes PrepareCommit/PrepareAbort, answers, writes the markers to every
partition of the transaction (chronik.coordinator.transaction_markers), then writes
CompleteCommit/CompleteAbort. A coordinator that loads a partition (start, failover)
finishes the transactions it finds half-way through Prepare*.

A request that finds its id busy (a state write, or the markers and completion of the
previous transaction) is held until the id settles rather than answered
CONCURRENT_TRANSACTIONS at once (chronik.coordinator.transaction_holds).

The next transaction is registered with the completion. After the producer's own EndTxn
the completion is written in one batch with an Ongoing record for the same producer id
and epoch listing the partitions of the transaction just ended (and those of a next
AddPartitionsToTxn already held): the id's state here is Complete*, with those partitions
reserved. A next AddPartitionsToTxn (or AddOffsetsToTxn) naming only reserved partitions
is answered at once, with no write of its own: the stored Ongoing record already names
them, durable before the request came, so a coordinator that loads the id finds them
(and ends that transaction as Kafka ends an Ongoing one). A producer writes to the same
partitions transaction after transaction, so its AddPartitionsToTxn no longer waits for
an fsync. A partition outside the reservation is stored as before. A reservation unused
for RESERVATION_SECONDS is given back: the completion is stored again, so a coordinator
that loads the id later does not take an idle producer for one in a transaction (which
it would abort, fencing the producer, once the transaction timeout passed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode as E

from chronik.coordinator.host import ClusterPartitions, CoordinatorHost
from chronik.coordinator.transaction_holds import HeldRequests, NextTransaction
from chronik.coordinator.transaction_log import (
    InvalidTxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from chronik.coordinator.transaction_markers import MarkerSender
from chronik.coordinator.transaction_state import TxnMetadata, TxnState
from chronik.coordinator.transaction_topic import TOPIC, StoreError, TransactionTopic

log = logging.getLogger("chronik.transactions")

NONE = 0
NOT_COORDINATOR = int(E.not_coordinator)
LOAD_IN_PROGRESS = int(E.coordinator_load_in_progress)
NOT_AVAILABLE = int(E.coordinator_not_available)
CONCURRENT_TRANSACTIONS = int(E.concurrent_transactions)
INVALID_PRODUCER_ID_MAPPING = int(E.invalid_producer_id_mapping)
INVALID_PRODUCER_EPOCH = int(E.invalid_producer_epoch)
PRODUCER_FENCED = int(E.producer_fenced)
INVALID_TXN_STATE = int(E.invalid_txn_state)
INVALID_TRANSACTION_TIMEOUT = int(E.invalid_transaction_timeout)

# Kafka's epoch limit: past it a producer gets a new id (Short.MaxValue - 1).
MAX_EPOCH = 32766

DEFAULTS = {
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.state.log.num.partitions": "50",
}
# Between attempts to write a transaction's completion: doubling from the first to the
# last, and kept up for as long as this broker coordinates the transaction.
COMPLETE_RETRY_FIRST_SECONDS = 0.1
COMPLETE_RETRY_MAX_SECONDS = 2.0
# How long partitions reserved with a completion wait for the producer's next
# transaction before the completion is stored again without them. A producer that
# commits back to back comes back within milliseconds (Kafka Streams commits every
# 100 ms with exactly-once); an idle one costs one more state write.
RESERVATION_SECONDS = 1.0


class TransactionCoordinator:
    def __init__(self, broker: CoordinatorHost, markers: MarkerSender) -> None:
        self.broker = broker
        values = getattr(getattr(broker, "config", None), "values", {}) or {}
        config: Mapping[str, str] = {**DEFAULTS, **values}
        self.max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self.abort_interval_ms = int(
            config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        )
        self.expire_interval_ms = int(
            config["transaction.remove.expired.transaction.cleanup.interval.ms"]
        )
        self.expiration_ms = int(config["transactional.id.expiration.ms"])
        self.topic = TransactionTopic(broker, config)
        self.markers = markers
        self.txns: dict[str, TxnMetadata] = {}
        self._loaded: set[int] = set()
        self._loading: dict[int, asyncio.Future[None]] = {}
        self._epochs: dict[int, int] = {}  # coordinator epoch per partition, at load
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: list[asyncio.Task[None]] = []
        self._running = False
        self._held = HeldRequests()
        # Per id, the timer that gives back an unused reservation.
        self._reservations: dict[str, asyncio.TimerHandle] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def _cluster(self) -> ClusterPartitions | None:
        return getattr(self.broker, "cluster", None)

    async def start(self) -> None:
        """A single node serves every partition: it replays the topic if it exists. In a
        cluster the broker loads the partitions it leads, as it learns it leads them."""
        self._running = True
        if self._cluster() is None:
            count = self.topic.partition_count() or self.topic.num_partitions
            for partition in range(count):
                await self.load_partition(partition)
        self._timers.append(asyncio.create_task(self._abort_loop()))
        self._timers.append(asyncio.create_task(self._expire_loop()))

    async def stop(self) -> None:
        self._running = False
        for task in [*self._timers, *self._tasks]:
            task.cancel()
        for task in [*self._timers, *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._timers.clear()
        for handle in self._reservations.values():
            handle.cancel()
        self._reservations.clear()
        self._held.close()
        await self.markers.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- which ids are served here --------------------------------------------------------
    def coordinator_error(self, transactional_id: str) -> int | None:
        """None when this broker coordinates the id; COORDINATOR_LOAD_IN_PROGRESS while its
        partition loads; NOT_COORDINATOR otherwise."""
        if self._cluster() is None:
            return None
        count = self.topic.partition_count()
        if not count:
            return NOT_COORDINATOR
        partition = self.topic.partition_of(transactional_id)
        if partition in self._loading:
            return LOAD_IN_PROGRESS
        if partition not in self._loaded:
            return NOT_COORDINATOR
        return None

    def listing_error(self) -> int:
        return LOAD_IN_PROGRESS if self._loading else NONE

    def transactions(self) -> Iterable[TxnMetadata]:
        return list(self.txns.values())

    async def load_partition(self, partition: int) -> None:
        """Replay one partition of __transaction_state, then serve its ids; transactions
        caught in Prepare* get their markers written again (TransactionStateManager
        .loadTransactionsForTxnTopicPartition)."""
        if partition in self._loaded:
            return
        pending = self._loading.get(partition)
        if pending is not None:
            await asyncio.shield(pending)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loading[partition] = done
        try:
            loaded: dict[str, TxnMetadata] = {}
            for key, value, _ in await self.topic.replay(partition):
                try:
                    txn_id = decode_key(key)
                    if value is None:
                        loaded.pop(txn_id, None)
                    else:
                        loaded[txn_id] = decode_value(txn_id, value)
                except InvalidTxnRecord as exc:
                    log.warning("%s-%d: skipping a record: %s", TOPIC, partition, exc)
            if self._loading.get(partition) is done:
                self.txns.update(loaded)
                self._epochs[partition] = self.topic.coordinator_epoch(partition)
                self._loaded.add(partition)
                (log.info if loaded else log.debug)(
                    "%s-%d: loaded %d transactional ids", TOPIC, partition, len(loaded)
                )
                for txn in loaded.values():
                    if txn.state.preparing:
                        txn.pending = True
                        self._spawn(
                            self._finish(txn, txn.state == TxnState.PREPARE_COMMIT, partition)
                        )
        except Exception as exc:
            log.error("%s-%d: transactions not loaded: %s", TOPIC, partition, exc)
        finally:
            if self._loading.get(partition) is done:
                del self._loading[partition]
            done.set_result(None)

    def is_loaded(self, partition: int) -> bool:
        """Whether the partition's state is loaded and served here."""
        return partition in self._loaded

    def unload_partition(self, partition: int) -> None:
        self._loading.pop(partition, None)
        self._loaded.discard(partition)
        self._epochs.pop(partition, None)
        for txn_id in [t for t in self.txns if self.topic.partition_of(t) == partition]:
            del self.txns[txn_id]
            self._held.settled(txn_id)
            handle = self._reservations.pop(txn_id, None)
            if handle is not None:
                handle.cancel()

    # -- requests held while an id is busy ------------------------------------------------
    def _unpend(self, txn: TxnMetadata) -> None:
        txn.pending = False
        self._held.settled(txn.transactional_id)

    @staticmethod
    def _busy(txn: TxnMetadata) -> bool:
        return (
            txn.pending or txn.state.preparing or txn.state == TxnState.PREPARE_EPOCH_FENCE
        )

    # -- writes ---------------------------------------------------------------------------
    async def _store(self, txn: TxnMetadata, then: TxnMetadata | None = None) -> None:
        """Write ``txn`` as the id's new state (and ``then`` after it, in the same batch);
        raises StoreError."""
        partition = self.topic.partition_of(txn.transactional_id)
        key = encode_key(txn.transactional_id)
        if then is None:
            await self.topic.write(partition, key, encode_value(txn))
        else:
            await self.topic.write_many(
                partition, [(key, encode_value(txn)), (key, encode_value(then))]
            )

    def _served(self, txn_id: str) -> int:
        return self.coordinator_error(txn_id) or NONE

    # -- InitProducerId -------------------------------------------------------------------
    async def init_producer_id(
        self,
        txn_id: str,
        timeout_ms: int,
        expected_pid: int = -1,
        expected_epoch: int = -1,
    ) -> tuple[int, int, int]:
        """(error code, producer id, epoch) for a transactional producer's InitProducerId."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        deadline = self._held.deadline()
        fenced = False  # this request aborted the open transaction (and bumped the epoch)
        while True:
            code = self._served(txn_id)
            if code:
                return code, -1, -1
            txn = self.txns.get(txn_id)
            if txn is None:
                break
            if not self._busy(txn) and not fenced and not _expected(
                txn, expected_pid, expected_epoch
            ):
                # KIP-360: a producer may bump its own epoch only from the current one.
                return PRODUCER_FENCED, -1, -1
            if not self._busy(txn) and txn.state != TxnState.ONGOING:
                break
            if txn.state == TxnState.ONGOING and not txn.pending:
                if fenced:  # the abort was not stored: the client tries again
                    return CONCURRENT_TRANSACTIONS, -1, -1
                # The new producer fences the old: its transaction is aborted with a
                # bumped epoch, and this request goes on once that is done.
                self._begin_abort(txn, bump=True)
                fenced = True
            if not await self._held.until_settled(txn_id, deadline):
                return CONCURRENT_TRANSACTIONS, -1, -1
        now = self.broker.now_ms()
        if txn is None:
            pid = await self._allocate_producer_id()
            if pid is None:
                return NOT_AVAILABLE, -1, -1
            new = TxnMetadata(txn_id, pid, 0, TxnState.EMPTY, timeout_ms, -1, now)
            if txn_id in self.txns:  # another InitProducerId got there meanwhile
                return CONCURRENT_TRANSACTIONS, -1, -1
            self.txns[txn_id] = new
            new.pending = True
            try:
                await self._store(new)
            except StoreError as exc:
                self.txns.pop(txn_id, None)
                return exc.code, -1, -1
            finally:
                self._unpend(new)
            return NONE, pid, 0
        pid, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch > MAX_EPOCH:
            new_pid = await self._allocate_producer_id()
            if new_pid is None:
                return NOT_AVAILABLE, -1, -1
            pid, epoch = new_pid, 0
        new = txn.copy(
            producer_id=pid,
            producer_epoch=epoch,
            state=TxnState.EMPTY,
            timeout_ms=timeout_ms,
            txn_start_ms=-1,
            last_update_ms=now,
            partitions=set(),
        )
        code = await self._transition(txn, new)
        if code:
            return code, -1, -1
        return NONE, pid, epoch

    async def _allocate_producer_id(self) -> int | None:
        cluster = self._cluster()
        if cluster is None:
            return int(self.broker.producer_ids.allocate())
        try:
            return int(await cluster.allocate_producer_id())
        except Exception as exc:  # ZooKeeper unreachable: the client retries
            log.debug("no producer id block from ZooKeeper: %s", exc)
            return None

    async def _transition(self, txn: TxnMetadata, new: TxnMetadata) -> int:
        """Store ``new`` and make it the id's state; the error code if it failed."""
        txn.pending = True
        try:
            await self._store(new)
        except StoreError as exc:
            self._unpend(txn)
            return exc.code
        if self.txns.get(txn.transactional_id) is txn:
            self.txns[txn.transactional_id] = new
        self._unpend(txn)
        return NONE

    # -- checks shared by AddPartitions, AddOffsets, EndTxn ---------------------------------
    def _check(self, txn_id: str, pid: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        code = self._served(txn_id)
        if code:
            return code, None
        txn = self.txns.get(txn_id)
        if txn is None or txn.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING, None
        if epoch != txn.producer_epoch:
            return PRODUCER_FENCED, None
        return NONE, txn

    async def _check_settled(
        self, txn_id: str, pid: int, epoch: int
    ) -> tuple[int, TxnMetadata | None]:
        """_check once the id is not busy; CONCURRENT_TRANSACTIONS if it stays busy."""
        deadline = self._held.deadline()
        while True:
            code, txn = self._check(txn_id, pid, epoch)
            if txn is None or not self._busy(txn):
                return code, txn
            if not await self._held.until_settled(txn_id, deadline):
                return CONCURRENT_TRANSACTIONS, None

    async def add_partitions(
        self, txn_id: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> int:
        wanted = set(partitions)
        deadline = self._held.deadline()
        while True:
            code, txn = self._check(txn_id, pid, epoch)
            if txn is None:
                return code
            if not self._busy(txn):
                break
            if txn.state.preparing and not self._held.has_next(txn_id):
                # The previous transaction's markers are being written: this one's
                # Ongoing state goes with its completion.
                answer = await self._held.queue_next(txn_id, pid, epoch, wanted, deadline)
                if answer is not None:
                    return answer
            elif not await self._held.until_settled(txn_id, deadline):
                return CONCURRENT_TRANSACTIONS
        if txn.state == TxnState.DEAD:
            return INVALID_TXN_STATE
        if txn.state == TxnState.ONGOING and wanted <= txn.partitions:
            return NONE
        now = self.broker.now_ms()
        new = txn.copy(
            state=TxnState.ONGOING,
            partitions=(txn.partitions if txn.state == TxnState.ONGOING else set()) | wanted,
            txn_start_ms=txn.txn_start_ms if txn.state == TxnState.ONGOING else now,
            last_update_ms=now,
        )
        if txn.reserved is not None and wanted <= txn.reserved:
            # The stored Ongoing record names them already: nothing to write.
            new.reserved = txn.reserved
            self.txns[txn_id] = new
            return NONE
        return await self._transition(txn, new)

    # -- EndTxn ---------------------------------------------------------------------------
    async def end_transaction(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        # A retried EndTxn whose first attempt is still writing its markers waits for them.
        code, txn = await self._check_settled(txn_id, pid, epoch)
        if txn is None:
            return code
        state = txn.state
        if state == TxnState.ONGOING:
            partition = self.topic.partition_of(txn_id)
            now = self.broker.now_ms()
            prepared = txn.copy(
                state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                last_update_ms=now,
            )
            code = await self._transition(txn, prepared)
            if code:
                return code
            prepared.pending = True
            self._spawn(self._finish(prepared, commit, partition, producer_goes_on=True))
            return NONE
        if state == TxnState.COMPLETE_COMMIT and commit:
            return NONE
        if state == TxnState.COMPLETE_ABORT and not commit:
            return NONE
        return INVALID_TXN_STATE

    def _begin_abort(self, txn: TxnMetadata, bump: bool) -> None:
        """Abort an Ongoing transaction on the coordinator's own initiative (a timeout, a
        new producer of the id): its epoch is bumped first, so the old producer is fenced
        by every partition's marker and by this coordinator."""
        txn.pending = True
        self._spawn(self._abort(txn, bump))

    async def _abort(self, txn: TxnMetadata, bump: bool) -> None:
        partition = self.topic.partition_of(txn.transactional_id)
        epoch = txn.producer_epoch + 1 if bump and txn.producer_epoch < MAX_EPOCH else (
            txn.producer_epoch
        )
        prepared = txn.copy(
            producer_epoch=epoch,
            state=TxnState.PREPARE_ABORT,
            last_update_ms=self.broker.now_ms(),
        )
        try:
            await self._store(prepared)
        except StoreError as exc:
            log.info("transaction %s: abort not stored: %s", txn.transactional_id, exc)
            self._unpend(txn)
            return
        txn.pending = False
        if self.txns.get(txn.transactional_id) is not txn:
            self._held.settled(txn.transactional_id)
            return
        self.txns[txn.transactional_id] = prepared
        prepared.pending = True
        await self._finish(prepared, False, partition)

    async def _finish(
        self, txn: TxnMetadata, commit: bool, partition: int, producer_goes_on: bool = False
    ) -> None:
        """Markers to every partition, then Complete*: after the producer's own EndTxn
        with its next transaction's partitions reserved (and a held AddPartitionsToTxn
        answered) in the same write. Stops if this broker stops coordinating the id: the
        next coordinator finishes from the stored Prepare*."""
        following: NextTransaction | None = None
        try:
            if producer_goes_on:
                # The EndTxn answer first: its connection writes it on the loop's next
                # turn, before the markers' appends.
                await asyncio.sleep(0)
            epoch = self._epochs.get(partition, self.topic.coordinator_epoch(partition))
            done = await self.markers.send(
                txn.producer_id,
                txn.producer_epoch,
                epoch,
                commit,
                sorted(txn.partitions),
                still_coordinating=lambda: partition in self._loaded
                and self.txns.get(txn.transactional_id) is txn,
            )
            if not done:
                return
            now = self.broker.now_ms()
            complete = txn.copy(
                state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                partitions=set(),
                txn_start_ms=-1,
                last_update_ms=now,
            )
            following = self._held.take_next(txn.transactional_id)
            if following is not None and (following.producer_id, following.producer_epoch) != (
                complete.producer_id, complete.producer_epoch
            ):
                following.resolve(None)  # it looks again, and gets its error
                following = None
            reserving = None
            if producer_goes_on or following is not None:
                reserving = complete.copy(
                    state=TxnState.ONGOING,
                    partitions=(txn.partitions if producer_goes_on else set())
                    | (following.partitions if following is not None else set()),
                    txn_start_ms=now,
                    last_update_ms=now,
                )
            stored = await self._store_completion(txn, complete, partition, reserving)
            if stored is None or self.txns.get(txn.transactional_id) is not txn:
                return
            if stored is complete or reserving is None:
                self.txns[txn.transactional_id] = complete
                return
            reserved = frozenset(reserving.partitions)
            if following is None:
                complete.reserved = reserved
                self.txns[txn.transactional_id] = complete
                self._reserve(complete)
                return
            ongoing = complete.copy(
                state=TxnState.ONGOING,
                partitions=set(following.partitions),
                txn_start_ms=now,
                last_update_ms=now,
            )
            ongoing.reserved = reserved
            self.txns[txn.transactional_id] = ongoing
            following.resolve(NONE)
        finally:
            if following is not None:
                following.resolve(None)  # not written with the completion: it looks again
            self._unpend(txn)

    def _reserve(self, txn: TxnMetadata) -> None:
        """Give the reservation of ``txn`` (the id's Complete* state) back if the
        producer does not use it within RESERVATION_SECONDS."""
        txn_id = txn.transactional_id
        previous = self._reservations.pop(txn_id, None)
        if previous is not None:
            previous.cancel()

        def expired() -> None:
            if self._reservations.get(txn_id) is handle:
                del self._reservations[txn_id]
            if self.txns.get(txn_id) is txn and not txn.pending and self._running:
                self._spawn(give_back())

        async def give_back() -> None:
            code = await self._transition(txn, txn.copy(last_update_ms=self.broker.now_ms()))
            if code and self.txns.get(txn_id) is txn and self._running:
                self._reserve(txn)  # not stored: the reservation holds, tried again later

        handle = asyncio.get_running_loop().call_later(RESERVATION_SECONDS, expired)
        self._reservations[txn_id] = handle

    async def _store_completion(
        self,
        txn: TxnMetadata,
        complete: TxnMetadata,
        partition: int,
        ongoing: TxnMetadata | None = None,
    ) -> TxnMetadata | None:
        """Write Complete* until it is written or this broker no longer coordinates the
        transaction (None): its markers are written, so giving up would leave the id in
        Prepare* answering CONCURRENT_TRANSACTIONS until another coordinator loads it.
        Kafka's coordinator likewise retries the append for as long as it coordinates.
        The first attempt writes ``ongoing`` (the next transaction's reservation) in the
        same batch; what was written last: ``ongoing`` if that attempt succeeded, else
        ``complete``."""
        failures = 0
        delay = COMPLETE_RETRY_FIRST_SECONDS
        while partition in self._loaded and self.txns.get(txn.transactional_id) is txn:
            try:
                await self._store(complete, ongoing)
            except StoreError as exc:
                ongoing = None
                failures += 1
                if failures == 1:
                    log.warning(
                        "transaction %s: completion not stored: %s; retrying while this "
                        "broker coordinates it", txn.transactional_id, exc,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, COMPLETE_RETRY_MAX_SECONDS)
                continue
            if failures:
                log.info("transaction %s: completion stored after %d failed attempts",
                         txn.transactional_id, failures)
            return ongoing or complete
        if failures:
            log.info("transaction %s: completion left to the next coordinator of %s-%d "
                     "after %d failed attempts", txn.transactional_id, TOPIC, partition,
                     failures)
        return None

    # -- timers ---------------------------------------------------------------------------
    async def _abort_loop(self) -> None:
        while True:
            await asyncio.sleep(self.abort_interval_ms / 1000)
            self.abort_timed_out(self.broker.now_ms())

    def abort_timed_out(self, now_ms: int) -> int:
        """Abort every Ongoing transaction older than its timeout (fencing its producer)."""
        count = 0
        for txn in list(self.txns.values()):
            if (
                txn.state == TxnState.ONGOING
                and not txn.pending
                and txn.txn_start_ms >= 0
                and now_ms - txn.txn_start_ms > txn.timeout_ms
                and self._served(txn.transactional_id) == NONE
            ):
                log.info(
                    "transaction %s (producer %d, epoch %d) timed out after %d ms: aborting",
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.timeout_ms,
                )
                self._begin_abort(txn, bump=True)
                count += 1
        return count

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.expire_interval_ms / 1000)
            await self.expire_ids(self.broker.now_ms())

    async def expire_ids(self, now_ms: int) -> int:
        """Forget finished ids idle for transactional.id.expiration.ms (a tombstone)."""
        count = 0
        for txn in list(self.txns.values()):
            if (
                txn.state.finished
                and not txn.pending
                and now_ms - txn.last_update_ms > self.expiration_ms
                and self._served(txn.transactional_id) == NONE
            ):
                partition = self.topic.partition_of(txn.transactional_id)
                try:
                    await self.topic.write(partition, encode_key(txn.transactional_id), None)
                except StoreError:
                    continue
                if self.txns.get(txn.transactional_id) is txn:
                    del self.txns[txn.transactional_id]
                    count += 1
        if count:
            log.info("expired %d transactional ids", count)
        return count


def _expected(txn: TxnMetadata, expected_pid: int, expected_epoch: int) -> bool:
    """Whether an InitProducerId naming ``expected_pid``/``expected_epoch`` (KIP-360; -1:
    none) may bump the id's epoch: only from its current producer id and epoch."""
    return expected_pid < 0 or (
        expected_pid == txn.producer_id and expected_epoch in (txn.producer_epoch, -1)
    )


def client_code(code: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED (KIP-588) as a request of ``version`` knows it: versions before
    ``fenced_since`` get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if code == PRODUCER_FENCED and version < fenced_since:
        return INVALID_PRODUCER_EPOCH
    return code
