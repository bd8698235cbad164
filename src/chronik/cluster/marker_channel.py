"""Transaction markers to the leaders on other brokers: WriteTxnMarkers v1, one
connection per broker (Kafka's TransactionMarkerChannelManager's network side). The
transaction coordinator (chronik.coordinator.transaction_markers) is given this channel
by the server; it decides what to send and retries, this sends it.

One request is in flight per broker. The markers of the transactions that end while it
is (one entry per transaction) go together in the next request, as Kafka's channel
manager drains its queue per broker: the receiving leader appends them all before it
waits, so concurrent transactions share its fsyncs and its wait for replication instead
of queueing one round trip each. A producer id appears once per request (its response
entries are keyed by it); a second marker of the same producer waits for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as E
from kio.schema.write_txn_markers.v1 import request as wtm

from chronik.cluster.replica_client import BrokerClient, BrokerUnreachable

if TYPE_CHECKING:
    from chronik.cluster.node import ClusterNode
    from chronik.security.broker_security import ClientSecurity

log = logging.getLogger("chronik.transactions")

# The receiving leader waits up to 30 s for its in-sync replicas.
REQUEST_TIMEOUT = 35.0
Partition = tuple[str, int]


@dataclass
class _Queued:
    """One transaction's markers for one broker, waiting for the next request there."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[Partition]
    answer: asyncio.Future[dict[Partition, int]]

    def resolve(self, codes: dict[Partition, int]) -> None:
        if not self.answer.done():
            self.answer.set_result(codes)

    def unreachable(self) -> None:
        self.resolve({tp: int(E.coordinator_not_available) for tp in self.partitions})


class MarkerChannel:
    def __init__(self, cluster: ClusterNode, security: ClientSecurity | None) -> None:
        self.cluster = cluster
        self.security = security
        self._clients: dict[int, BrokerClient] = {}
        self._queued: dict[int, list[_Queued]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    def leader_of(self, topic: str, partition: int) -> int:
        return self.cluster.leader_of(topic, partition)

    def partition_count(self, topic: str) -> int | None:
        return self.cluster.partition_count(topic)

    async def close(self) -> None:
        senders = list(self._senders.values())
        for task in senders:
            task.cancel()
        for task in senders:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for queue in self._queued.values():
            for entry in queue:
                entry.unreachable()
        self._queued.clear()
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, node_id: int) -> BrokerClient | None:
        info = self.cluster.broker_info(node_id)
        if info is None:
            return None
        client = self._clients.get(node_id)
        if client is None or (client.host, client.port) != (info.host, info.port):
            if client is not None:
                client.close()
            client = BrokerClient(
                info.host,
                info.port,
                f"txn-markers-{self.cluster.node_id}",
                security=self.security,
            )
            self._clients[node_id] = client
        return client

    async def write(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[Partition],
    ) -> dict[Partition, int]:
        """Each partition's error code from ``leader`` (NONE: its marker is durable there)."""
        entry = _Queued(
            producer_id, producer_epoch, coordinator_epoch, commit, partitions,
            asyncio.get_running_loop().create_future(),
        )
        self._queued.setdefault(leader, []).append(entry)
        if leader not in self._senders:
            self._senders[leader] = asyncio.create_task(self._send_queued(leader))
        return await asyncio.shield(entry.answer)

    def _next_batch(self, leader: int) -> list[_Queued]:
        """The queued entries for one request: each producer id once, oldest first."""
        queue = self._queued.get(leader, [])
        batch: list[_Queued] = []
        rest: list[_Queued] = []
        producers: set[int] = set()
        for entry in queue:
            if entry.producer_id in producers:
                rest.append(entry)
            else:
                producers.add(entry.producer_id)
                batch.append(entry)
        if rest:
            self._queued[leader] = rest
        else:
            self._queued.pop(leader, None)
        return batch

    async def _send_queued(self, leader: int) -> None:
        """Send the broker's queue, a request at a time, until it is empty."""
        batch: list[_Queued] = []
        try:
            while batch := self._next_batch(leader):
                try:
                    await self._send(leader, batch)
                except Exception:  # no transaction is left waiting on a sender gone
                    log.exception("markers to broker %d", leader)
                for entry in batch:
                    entry.unreachable()  # those the response did not answer
        finally:
            # Nothing awaited since the queue was found empty: a marker queued after
            # this starts a new sender.
            self._senders.pop(leader, None)
            for entry in batch:  # cancelled mid-request (the broker stops)
                entry.unreachable()

    async def _send(self, leader: int, batch: list[_Queued]) -> None:
        client = self._client(leader)
        if client is None:
            for entry in batch:
                entry.unreachable()
            return
        request = wtm.WriteTxnMarkersRequest(
            markers=tuple(_marker(entry) for entry in batch)
        )
        try:
            response = await client.request(request, REQUEST_TIMEOUT)
        except BrokerUnreachable as exc:
            log.debug("markers to broker %d: %s", leader, exc)
            for entry in batch:
                entry.unreachable()
            return
        codes: dict[int, dict[Partition, int]] = {}
        for marker in response.markers:
            mine = codes.setdefault(int(marker.producer_id), {})
            for topic in marker.topics:
                for part in topic.partitions:
                    mine[(topic.name, int(part.partition_index))] = int(part.error_code)
        for entry in batch:
            answered = codes.get(entry.producer_id, {})
            entry.resolve(
                {tp: answered.get(tp, int(E.unknown_server_error)) for tp in entry.partitions}
            )


def _marker(entry: _Queued) -> wtm.WritableTxnMarker:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in entry.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return wtm.WritableTxnMarker(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        transaction_result=entry.commit,
        topics=tuple(
            wtm.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
            for t, ps in by_topic.items()
        ),
        coordinator_epoch=entry.coordinator_epoch,
    )
