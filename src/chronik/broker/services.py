"""What a request handler may use of the broker: its services, each with its type (as
Kafka's KafkaApis is given its collaborators). chronik.broker.server.Broker provides
them; handlers see this Protocol through RequestContext.services, never the server with
its lifecycle, listeners and connections.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from chronik.broker.config import BrokerConfig
    from chronik.broker.dynamic_configs import DynamicBrokerConfigs
    from chronik.broker.fetch_sessions import FetchSessionCache
    from chronik.broker.memory_pool import MemoryPool
    from chronik.broker.metadata_cache import TopicEntryCache
    from chronik.broker.metrics import Metrics
    from chronik.broker.quota_manager import ClientQuotas
    from chronik.broker.schema_validation import SchemaValidator
    from chronik.cluster.node import ClusterNode
    from chronik.coordinator.group_coordinator import GroupCoordinator
    from chronik.coordinator.marker_writer import MarkerWriter
    from chronik.coordinator.producer_ids import ProducerIdAllocator
    from chronik.coordinator.transaction_coordinator import TransactionCoordinator
    from chronik.security.authorizer import Authorizer
    from chronik.security.broker_security import BrokerSecurity
    from chronik.storage.catalog import Catalog
    from chronik.storage.partition_log import PartitionLog
    from chronik.storage.partition_writer import PartitionWriter


class Services(Protocol):
    # Settings and identity.
    config: BrokerConfig
    dynamic: DynamicBrokerConfigs
    node_id: int | None
    cluster_id: str
    data_dir: Path
    # The logs, and the one path that appends to them.
    catalog: Catalog
    writer: PartitionWriter
    # The cluster (ZooKeeper, replication), None on a single node.
    cluster: ClusterNode | None
    # Coordinators.
    coordinator: GroupCoordinator | None
    txn_coordinator: TransactionCoordinator
    markers: MarkerWriter
    producer_ids: ProducerIdAllocator
    # Security, quotas, resources.
    security: BrokerSecurity
    authorizer: Authorizer
    quotas: ClientQuotas
    metrics: Metrics
    memory_pool: MemoryPool
    # Fetch sessions (KIP-227).
    fetch_sessions: FetchSessionCache
    # Each topic's encoded Metadata entry, until the topic changes.
    metadata_entries: TopicEntryCache
    # Produce-time schema checks of topics that opt in (its registry None when not served).
    schema_validator: SchemaValidator

    def now_ms(self) -> int: ...

    def locate(self, name: str, index: int) -> tuple[PartitionLog | None, int]: ...

    def partition_count(self, name: str) -> int | None: ...

    async def wait_for_append(self, logs: list[object], timeout: float) -> None: ...

    def reload_tls(self) -> None: ...
