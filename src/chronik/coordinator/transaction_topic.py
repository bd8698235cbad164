"""The internal compacted topic __transaction_state as the transaction coordinator's
store (record formats in chronik.coordinator.transaction_log).

On a single node the broker creates it when first needed and holds every partition. In a
cluster the topic is created like __consumer_offsets (transaction.state.log.* settings,
replicas capped to the live brokers) and this broker writes only to the partitions it
leads; a write goes through the partition writer (origin COORDINATOR) and is answered
once every in-sync replica has it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode as E

from chronik.coordinator.host import ClusterPartitions, CoordinatorHost
from chronik.coordinator.offsets_codec import partition_for
from chronik.coordinator.offsets_topic import _read_log
from chronik.records import builder
from chronik.records.batch import read_header
from chronik.storage.partition_log import PartitionLog
from chronik.storage.partition_writer import AppendOrigin, AppendRefused, PartitionWriter

TOPIC = "__transaction_state"
# How long a state write waits for the in-sync replicas (Kafka's
# transaction.state.log write timeout is the request timeout).
REPLICATION_TIMEOUT_SECONDS = 5.0


class StoreError(Exception):
    """A state write that did not become durable; ``code`` is what to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TransactionTopic:
    def __init__(self, broker: CoordinatorHost, config: Mapping[str, str]) -> None:
        self.broker = broker
        self.num_partitions = int(config.get("transaction.state.log.num.partitions", "50"))
        self.segment_bytes = config.get("transaction.state.log.segment.bytes", "104857600")

    def _cluster(self) -> ClusterPartitions | None:
        return getattr(self.broker, "cluster", None)

    def configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "segment.bytes": self.segment_bytes}

    def partition_count(self) -> int | None:
        cluster = self._cluster()
        if cluster is not None:
            return cluster.partition_count(TOPIC)
        topic = self.broker.catalog.get(TOPIC)
        return len(topic.partitions) if topic is not None else self.num_partitions

    def partition_of(self, transactional_id: str) -> int:
        count = self.partition_count() or self.num_partitions
        return partition_for(transactional_id, count)

    async def ensure(self, timeout_ms: int = 3000) -> None:
        """Create the topic when first needed."""
        cluster = self._cluster()
        if cluster is not None:
            await cluster.ensure_transaction_topic(timeout_ms)
            return
        catalog = self.broker.catalog
        if catalog.get(TOPIC) is None:
            created = catalog.create_topic(TOPIC, self.num_partitions, self.configs())
            if inspect.isawaitable(created):
                await created

    def local_log(self, partition: int) -> PartitionLog | None:
        cluster = self._cluster()
        if cluster is not None:
            return cluster.local_log(TOPIC, partition)
        topic = self.broker.catalog.get(TOPIC)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def coordinator_epoch(self, partition: int) -> int:
        cluster = self._cluster()
        if cluster is None:
            return 0
        state = cluster.view.state(TOPIC, partition)
        return state.leader_epoch if state is not None else -1

    async def replay(self, partition: int) -> list[tuple[bytes, bytes | None, int]]:
        plog = self.local_log(partition)
        if plog is None:
            return []
        return await _read_log(plog)

    async def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Append one record and wait until it is durable; raises StoreError."""
        await self.write_many(partition, [(key, value)])

    async def write_many(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> None:
        """Append ``records`` (key, value) as one batch, so that all of them or none are
        written, and wait until they are durable; raises StoreError."""
        if self._cluster() is None:
            await self.ensure()
        plog = self.local_log(partition)
        if plog is None:
            raise StoreError(int(E.not_coordinator), f"{TOPIC}-{partition} is not led here")
        now = self.broker.now_ms()
        batch = bytearray(
            builder.build_batch([builder.Record(now, key, value) for key, value in records])
        )
        writer: PartitionWriter = self.broker.writer
        try:
            await writer.write(
                plog, TOPIC, partition, batch, read_header(batch), now,
                AppendOrigin.COORDINATOR, REPLICATION_TIMEOUT_SECONDS,
            )
        except AppendRefused as exc:
            # Too few in-sync replicas, before or after the append.
            raise StoreError(int(E.coordinator_not_available), str(exc)) from None
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            # As Kafka maps a failed state append: the client looks the coordinator up again.
            raise StoreError(int(E.not_coordinator), str(exc)) from None
