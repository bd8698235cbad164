"""Transaction markers to the leaders on other brokers: WriteTxnMarkers v1, one
connection per broker (Kafka's TransactionMarkerChannelManager's network side). The
transaction coordinator (chronik.coordinator.transaction_markers) is given this channel
by the server; it decides what to send and retries, this sends it.
"""

from __future__ import annotations

import logging
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


class MarkerChannel:
    def __init__(self, cluster: ClusterNode, security: ClientSecurity | None) -> None:
        self.cluster = cluster
        self.security = security
        self._clients: dict[int, BrokerClient] = {}

    def leader_of(self, topic: str, partition: int) -> int:
        return self.cluster.leader_of(topic, partition)

    def partition_count(self, topic: str) -> int | None:
        return self.cluster.partition_count(topic)

    async def close(self) -> None:
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
        unreachable = {tp: int(E.coordinator_not_available) for tp in partitions}
        client = self._client(leader)
        if client is None:
            return unreachable
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
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
            response = await client.request(request, REQUEST_TIMEOUT)
        except BrokerUnreachable as exc:
            log.debug("markers to broker %d: %s", leader, exc)
            return unreachable
        codes: dict[Partition, int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    codes[(topic.name, int(part.partition_index))] = int(part.error_code)
        return {tp: codes.get(tp, int(E.unknown_server_error)) for tp in partitions}
