"""The one durable-append path of the broker (Kafka's ReplicaManager.appendRecords with an
AppendOrigin, and the PartitionWriter its coordinators write through).

Every append to a partition this broker leads goes through PartitionWriter: client
produce, the event store's HTTP appends, transaction markers, and the internal topics
__consumer_offsets, __transaction_state and _schemas (the schema registry). Each append
is two steps, because Produce releases its connection between them:

1. ``append`` (synchronous, nothing awaits, so the order of appends is the order of
   calls): the refusals made before a byte is written (``refusal``), the append itself
   (a failed write is undone by the log before it raises), then what follows every
   append: the replication layer told (an ISR of one moves the high watermark) and the
   fetches waiting on the log woken; client bytes counted for metrics.
2. ``durable``: the group commit (fsyncs shared by the waiters,
   chronik.storage.group_commit) and, in a cluster, the wait until every in-sync replica
   has the records (the high watermark passes them).

Where the rules differ by origin:

| origin      | lease checked | min ISR checked  | counted in bytes-in |
|-------------|---------------|------------------|---------------------|
| CLIENT      | yes           | with acks=all    | yes                 |
| HTTP        | no            | always           | yes                 |
| COORDINATOR | no            | always           | no                  |
| MARKER      | no            | always           | no                  |
| REGISTRY    | no            | always           | no                  |

The lease (a cluster broker that may have lost its ZooKeeper session appends nothing a
client could be told is written) is checked for clients only: the other writers wait
for replication, which a lost lease fails. The replication layer sits above storage, so
it is given to the writer (``attach``) rather than imported.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from chronik.protocol import errors
from chronik.records.batch import BatchHeader
from chronik.storage.group_commit import GroupCommitter
from chronik.storage.partition_log import AppendResult, PartitionLog, Prepare


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    HTTP = "http"
    COORDINATOR = "coordinator"
    MARKER = "marker"
    REGISTRY = "registry"


class Replication(Protocol):
    """What the writer needs of the cluster's replica manager."""

    def not_enough_replicas(self, topic: str, partition: int) -> str | None: ...

    def leader_appended(self, log: PartitionLog) -> None: ...

    def wait_replicated(
        self, topic: str, partition: int, offset: int, timeout: float
    ) -> Awaitable[tuple[int, str | None]]: ...


class AppendRefused(Exception):
    """An append refused, or not replicated in time: ``code`` is the Kafka error."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message or f"error {code}")
        self.code = code
        self.message = message


class PartitionWriter:
    def __init__(
        self,
        committer: GroupCommitter,
        wake: Callable[[PartitionLog], None],
        count_bytes: Callable[[str, int], None] | None = None,
    ) -> None:
        self.committer = committer
        self._wake = wake
        self._count_bytes = count_bytes
        self.replication: Replication | None = None
        self._lease_held: Callable[[], bool] | None = None

    def attach(self, replication: Replication, lease_held: Callable[[], bool]) -> None:
        """In a cluster: the replica manager, and whether this broker's lease holds."""
        self.replication = replication
        self._lease_held = lease_held

    # -- step 1: append ---------------------------------------------------------------
    def refusal(
        self, topic: str, partition: int, origin: AppendOrigin, acks: int = -1
    ) -> tuple[int, str | None] | None:
        """Why nothing may be appended now (error code, message), or None."""
        lease = self._lease_held
        if origin is AppendOrigin.CLIENT and lease is not None and not lease():
            # Its ZooKeeper session may be gone and the partition given to another
            # broker: nothing is written, so nothing is acknowledged, as its leader.
            return errors.NOT_LEADER_OR_FOLLOWER, None
        if acks == -1 and self.replication is not None:
            short = self.replication.not_enough_replicas(topic, partition)
            if short is not None:  # Kafka refuses before appending anything
                return errors.NOT_ENOUGH_REPLICAS, short
        return None

    def append(
        self,
        log: PartitionLog,
        topic: str,
        batch: bytearray,
        header: BatchHeader,
        now_ms: int,
        origin: AppendOrigin,
        prepare: Prepare | None = None,
    ) -> AppendResult:
        """Append a validated batch; raises what the log raises (a storage error, a
        producer state or version error), with nothing written."""
        result = log.append(batch, header, now_ms, prepare)
        if not result.duplicate:
            self.appended(log)
            if self._count_bytes is not None and origin in (
                AppendOrigin.CLIENT,
                AppendOrigin.HTTP,
            ):
                self._count_bytes(topic, len(batch))
        return result

    def append_marker(
        self,
        log: PartitionLog,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> AppendResult:
        result = log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, now_ms)
        self.appended(log)
        return result

    def appended(self, log: PartitionLog) -> None:
        """A leader's log grew: its high watermark may move (an ISR of one), and the
        fetches waiting on it wake."""
        if self.replication is not None:
            self.replication.leader_appended(log)
        self._wake(log)

    # -- step 2: durable --------------------------------------------------------------
    async def durable(
        self, log: PartitionLog, topic: str, partition: int, last_offset: int, timeout: float
    ) -> tuple[int, str | None]:
        """acks=all: the fsync (group commit) and, in a cluster, every in-sync replica
        having the records up to ``last_offset``. (0, None) when both hold, else the
        replication's error; a failed fsync raises KafkaStorageError."""
        synced = self.committer.durable_future(log)  # the fsync starts now, if due
        if synced is not None:
            await synced
        if self.replication is None:
            return errors.NONE, None
        # The followers fetched the records the moment they were appended: their
        # replication went on while the fsync ran.
        return await self.replication.wait_replicated(topic, partition, last_offset + 1, timeout)

    # -- step 2 for several logs at once ----------------------------------------------
    def start_sync(self, log: PartitionLog) -> asyncio.Future[None] | None:
        """Start now the fsync (group commit) that makes what ``log`` has so far durable,
        for ``durable_all``: the future done once it has completed, or None if that is
        already so. Raises KafkaStorageError for a log offline."""
        return self.committer.durable_future(log)

    async def durable_all(
        self,
        appended: Sequence[tuple[asyncio.Future[None] | None, str, int, int]],
        timeout: float,
    ) -> list[tuple[int, str | None] | BaseException]:
        """``durable`` for appends to several logs, each given as (its start_sync, topic,
        partition, last offset): the fsyncs, already running side by side, waited for
        without a task each, then (in a cluster) the in-sync replicas of all at once.
        One outcome per append, in order: (error code, message), or the exception of a
        failed fsync (KafkaStorageError)."""
        outcomes: list[tuple[int, str | None] | BaseException] = []
        for synced, *_ in appended:
            try:
                if synced is not None:
                    await synced
            except Exception as exc:
                outcomes.append(exc)
                continue
            outcomes.append((errors.NONE, None))
        replication = self.replication
        if replication is None:
            return outcomes
        waits = [
            replication.wait_replicated(topic, partition, last + 1, timeout)
            for (_, topic, partition, last), outcome in zip(appended, outcomes, strict=True)
            if not isinstance(outcome, BaseException)
        ]
        replicated = iter(await asyncio.gather(*waits, return_exceptions=True))
        return [
            outcome if isinstance(outcome, BaseException) else next(replicated)
            for outcome in outcomes
        ]

    # -- both steps, for writers of one batch at a time ------------------------------
    async def write(
        self,
        log: PartitionLog,
        topic: str,
        partition: int,
        batch: bytearray,
        header: BatchHeader,
        now_ms: int,
        origin: AppendOrigin,
        timeout: float,
    ) -> AppendResult:
        """Refusal check, append and wait until durable. Raises AppendRefused for a
        refusal or a write the in-sync replicas did not all take in time, and what the
        log raises for a failed write or fsync."""
        refused = self.refusal(topic, partition, origin)
        if refused is not None:
            raise AppendRefused(*refused)
        result = self.append(log, topic, batch, header, now_ms, origin)
        code, message = await self.durable(log, topic, partition, result.last_offset, timeout)
        if code != errors.NONE:
            raise AppendRefused(code, message)
        return result
