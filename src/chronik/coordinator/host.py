"""What the coordinators use of the broker that hosts them, as Protocols: the layer above
(chronik.broker.server.Broker, and chronik.cluster.node.ClusterNode for the cluster's
part) provides them, so the coordinators need not import it. Tests give small stand-ins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from chronik.cluster.view import ClusterView
    from chronik.coordinator.producer_ids import ProducerIdAllocator
    from chronik.storage.catalog import Catalog
    from chronik.storage.partition_log import PartitionLog
    from chronik.storage.partition_writer import PartitionWriter


class ClusterPartitions(Protocol):
    """What the coordinators ask of the cluster: which internal-topic partitions exist and
    are led here, their leader epochs, and producer ids from ZooKeeper's blocks."""

    view: ClusterView

    def partition_count(self, topic: str) -> int | None: ...

    def is_local_leader(self, topic: str, partition: int) -> bool: ...

    def local_log(self, topic: str, partition: int) -> PartitionLog | None: ...

    async def ensure_transaction_topic(self, timeout_ms: int) -> None: ...

    async def allocate_producer_id(self) -> int: ...


class CoordinatorHost(Protocol):
    """The broker as the coordinators see it."""

    catalog: Catalog
    writer: PartitionWriter
    producer_ids: ProducerIdAllocator

    @property
    def cluster(self) -> ClusterPartitions | None: ...

    def now_ms(self) -> int: ...
