"""The transaction coordinator's marker writer (Kafka's TransactionMarkerChannelManager):
a commit or abort marker to every partition of a transaction, through
chronik.broker.txn_markers.write_markers for the partitions this broker leads and
WriteTxnMarkers v1 to the leaders of the others, one connection per broker.

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
from typing import Any

from kio.schema.errors import ErrorCode as E
from kio.schema.write_txn_markers.v1 import request as wtm

from chronik.broker.txn_markers import write_markers
from chronik.cluster.replica_client import BrokerClient, BrokerUnreachable

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


class MarkerSender:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._clients: dict[int, BrokerClient] = {}

    async def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, node_id: int) -> BrokerClient | None:
        cluster = self.broker.cluster
        info = cluster.broker_info(node_id)
        if info is None:
            return None
        client = self._clients.get(node_id)
        if client is None or (client.host, client.port) != (info.host, info.port):
            if client is not None:
                client.close()
            client = BrokerClient(
                info.host,
                info.port,
                f"txn-markers-{self.broker.node_id}",
                security=self.broker.security.client,
            )
            self._clients[node_id] = client
        return client

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
            cluster = self.broker.cluster
            for tp in sorted(left):
                leader = -1 if cluster is None else cluster.leader_of(*tp)
                by_leader.setdefault(leader, []).append(tp)
            codes: dict[Partition, int] = {}
            for leader, tps in by_leader.items():
                if cluster is None or leader == self.broker.node_id:
                    codes.update(
                        await write_markers(
                            self.broker, producer_id, producer_epoch, coordinator_epoch,
                            commit, tps, timeout_s=REQUEST_TIMEOUT,
                        )
                    )
                elif leader < 0:
                    if cluster.partition_count(tps[0][0]) is None:
                        codes.update({tp: int(E.unknown_topic_or_partition) for tp in tps})
                    else:
                        codes.update({tp: int(E.leader_not_available) for tp in tps})
                else:
                    codes.update(
                        await self._remote(
                            leader, producer_id, producer_epoch, coordinator_epoch, commit, tps
                        )
                    )
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

    async def _remote(
        self,
        leader: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        tps: list[Partition],
    ) -> dict[Partition, int]:
        unreachable = {tp: int(E.coordinator_not_available) for tp in tps}
        client = self._client(leader)
        if client is None:
            return unreachable
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = wtm.WriteTxnMarkersRequest(
            markers=(
                wtm.WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    topics=tuple(
                        wtm.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps))
                        for t, ps in by_topic.items()
                    ),
                    coordinator_epoch=coordinator_epoch,
                ),
            )
        )
        try:
            response = await client.request(request, REQUEST_TIMEOUT + 5)
        except BrokerUnreachable as exc:
            log.debug("markers to broker %d: %s", leader, exc)
            return unreachable
        codes: dict[Partition, int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    codes[(topic.name, int(part.partition_index))] = int(part.error_code)
        return {tp: codes.get(tp, int(E.unknown_server_error)) for tp in tps}
