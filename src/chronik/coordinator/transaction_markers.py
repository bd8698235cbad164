"""The transaction coordinator's marker sender (Kafka's TransactionMarkerChannelManager):
a commit or abort marker to every partition of a transaction, through
chronik.coordinator.marker_writer for the partitions this broker leads and, in a
cluster, through the channel the cluster layer gives it (chronik.cluster.marker_channel:
WriteTxnMarkers v1 to the leaders of the others, one connection per broker). Every leader
is written to at once: the transaction waits for the slowest, not for their sum.

A partition whose leader is moving, has too few in-sync replicas or cannot be reached
is tried again (leader looked up again each round) until it takes the marker, the
coordinator stops coordinating the id (its successor finishes from the stored state),
or the broker stops. A partition of a deleted topic, or one whose producer or
coordinator epoch has moved on, is dropped, as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode as E

from chronik.coordinator.marker_writer import MarkerWriter

log = logging.getLogger("chronik.transactions")

RETRY_SECONDS = 0.2
REQUEST_TIMEOUT = 30.0
_DROPPED = {
    int(E.unknown_topic_or_partition),
    int(E.invalid_producer_epoch),
    int(E.transaction_coordinator_fenced),
    int(E.producer_fenced),
    int(E.invalid_topic_exception),
}

Partition = tuple[str, int]


class RemoteMarkers(Protocol):
    """Where partitions led by other brokers are, and their markers sent there."""

    def leader_of(self, topic: str, partition: int) -> int: ...

    def partition_count(self, topic: str) -> int | None: ...

    async def write(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[Partition],
    ) -> dict[Partition, int]: ...

    async def close(self) -> None: ...


class MarkerSender:
    def __init__(
        self, local: MarkerWriter, node_id: int | None, remote: RemoteMarkers | None = None
    ) -> None:
        self.local = local
        self.node_id = node_id
        self.remote = remote

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[Partition],
        still_coordinating: Callable[[], bool],
    ) -> bool:
        """True once every partition has its marker (or was dropped); False if the
        coordinator gave the id up first."""
        left = set(partitions)
        logged: set[tuple[Partition, int]] = set()
        while left:
            if not still_coordinating():
                return False
            by_leader: dict[int, list[Partition]] = {}
            remote = self.remote
            for tp in sorted(left):
                leader = -1 if remote is None else remote.leader_of(*tp)
                by_leader.setdefault(leader, []).append(tp)
            codes: dict[Partition, int] = {}
            if len(by_leader) == 1:  # one broker (a single node): no task to gather
                ((leader, tps),) = by_leader.items()
                codes = await self._write(
                    leader, tps, producer_id, producer_epoch, coordinator_epoch, commit
                )
            else:
                for answered in await asyncio.gather(
                    *(
                        self._write(leader, tps, producer_id, producer_epoch,
                                    coordinator_epoch, commit)
                        for leader, tps in by_leader.items()
                    )
                ):
                    codes.update(answered)
            for tp, code in codes.items():
                if code == 0:
                    left.discard(tp)
                elif code in _DROPPED:
                    log.info("marker for producer %d on %s-%d dropped: error %d",
                             producer_id, tp[0], tp[1], code)
                    left.discard(tp)
                elif (tp, code) not in logged:
                    logged.add((tp, code))
                    log.debug("marker for producer %d on %s-%d: error %d, retrying",
                              producer_id, tp[0], tp[1], code)
            if left:
                await asyncio.sleep(RETRY_SECONDS)
        return True

    async def _write(
        self,
        leader: int,
        tps: list[Partition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> dict[Partition, int]:
        """The markers of the partitions ``leader`` leads (-1: none known), written there;
        the leaders are written to at once, each waiting for its own replicas."""
        remote = self.remote
        if remote is None or leader == self.node_id:
            return await self.local.write(
                producer_id, producer_epoch, coordinator_epoch, commit, tps,
                timeout_s=REQUEST_TIMEOUT,
            )
        if leader < 0:
            if remote.partition_count(tps[0][0]) is None:
                return {tp: int(E.unknown_topic_or_partition) for tp in tps}
            return {tp: int(E.leader_not_available) for tp in tps}
        return await remote.write(
            leader, producer_id, producer_epoch, coordinator_epoch, commit, tps
        )
