"""The internal compacted topic __consumer_offsets as the group coordinator's store.

A group's records all go to partition abs(javaHash(group)) % offsets.topic.num.partitions,
so one group's history is one ordered log; a record's offset is its position there.
Key and value formats are in chronik.coordinator.offsets_codec.

On a single node this broker creates the topic and holds every partition. In a cluster
the controller creates it and this broker holds only the partitions it leads (the others
are None in the catalog): a group whose partition is not here is NOT_COORDINATOR.
Writes go through the partition writer (chronik.storage.partition_writer, origin
COORDINATOR) and are answered once every in-sync replica has them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode as E

from chronik.coordinator.host import ClusterPartitions, CoordinatorHost
from chronik.coordinator.offsets_codec import partition_for
from chronik.records import builder
from chronik.records.batch import read_header
from chronik.records.control import InvalidMarker, read_marker
from chronik.records.reader import CorruptRecords, iter_batches, iter_records
from chronik.storage.partition_writer import AppendOrigin, AppendRefused, PartitionWriter

if TYPE_CHECKING:
    from chronik.storage.catalog import Topic
    from chronik.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

_STORAGE = int(E.kafka_storage_error)
_NOT_COORDINATOR = int(E.not_coordinator)
_NOT_AVAILABLE = int(E.coordinator_not_available)
_UNKNOWN_PARTITION = int(E.unknown_topic_or_partition)
_TOO_LARGE = (int(E.message_too_large), int(E.record_list_too_large))
# A write the in-sync replicas did not all take (GroupMetadataManager's mapping).
_NOT_REPLICATED = (
    int(E.not_enough_replicas),
    int(E.not_enough_replicas_after_append),
    int(E.request_timed_out),
)
# Kafka's offsets.commit.timeout.ms: how long a write waits for the in-sync replicas.
REPLICATION_TIMEOUT_SECONDS = 5.0


class NotReplicated(Exception):
    """A write to a replicated __consumer_offsets partition that its ISR did not take."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message or f"error {code}")
        self.code = code


def store_error(exc: Exception, group_id: str, what: str, *, commit: bool = False) -> int:
    """The coordinator's error code for a failed write to __consumer_offsets, as Kafka maps
    a failed append (GroupMetadataManager, GroupCoordinatorService): a storage error means
    this broker cannot act as coordinator now (NOT_COORDINATOR, the client looks it up
    again and retries); an unknown partition COORDINATOR_NOT_AVAILABLE; too large an
    append INVALID_COMMIT_OFFSET_SIZE for commits. A storage error was logged once by the
    partition; anything unexpected is logged here."""
    code = getattr(exc, "code", None)
    if code == _STORAGE:
        log.debug("group %s: %s not stored: %s", group_id, what, exc)
        return _NOT_COORDINATOR
    if code == _UNKNOWN_PARTITION or code in _NOT_REPLICATED:
        return _NOT_AVAILABLE
    if code == int(E.not_leader_or_follower):
        return _NOT_COORDINATOR
    if code in _TOO_LARGE:
        return int(E.invalid_commit_offset_size) if commit else int(E.unknown_server_error)
    if isinstance(code, int):
        return code
    log.error("group %s: %s not stored", group_id, what, exc_info=exc)
    return _NOT_AVAILABLE

TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20


class NotCoordinator(Exception):
    """The group's __consumer_offsets partition is not led by this broker."""

    code = _NOT_COORDINATOR

# A key and a value (None: tombstone), both encoded by offsets_codec.
Record = tuple[bytes, bytes | None]
# What a replay yields: (key, value, position), or with transactions
# (key, value, position, producer_id, marker): producer_id is -1 for a record written
# outside a transaction; a transaction marker has key b"", value None and marker
# COMMIT or ABORT (chronik.records.control), None for every other record.
Replayed = tuple[bytes, bytes | None, int] | tuple[bytes, bytes | None, int, int, int | None]


class GroupStore(Protocol):
    """Where group records go: one durable, ordered log per group."""

    async def replay(self) -> Iterable[Replayed]:
        """Every record written so far, in log order."""
        ...

    async def write(
        self,
        group_id: str,
        records: list[Record],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> int:
        """Append and fsync; returns the position of the last record. With a producer
        id the records are one transactional batch of that producer's transaction."""
        ...


class OffsetsTopic:
    def __init__(self, broker: CoordinatorHost, config: Mapping[str, str]) -> None:
        self.broker = broker
        self.num_partitions = int(config.get("offsets.topic.num.partitions", "50"))
        self.segment_bytes = config.get("offsets.topic.segment.bytes", str(100 * 1024 * 1024))
        self._topic: Topic | None = None

    def _cluster(self) -> ClusterPartitions | None:
        return getattr(self.broker, "cluster", None)

    async def _ensure_topic(self) -> Topic:
        if self._topic is not None:
            return self._topic
        catalog = self.broker.catalog
        topic = catalog.get(TOPIC)
        if topic is None:
            created = catalog.create_topic(
                TOPIC,
                self.num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": self.segment_bytes},
            )
            if inspect.isawaitable(created):
                created = await created
            topic = catalog.get(TOPIC) or created
        self._topic = topic
        # An existing topic keeps its partition count, as in Kafka.
        self.num_partitions = len(topic.partitions)
        return topic

    def partition_count(self) -> int | None:
        """Partitions of __consumer_offsets: the cluster's count, or this node's."""
        cluster = self._cluster()
        if cluster is None:
            return self.num_partitions
        return cluster.partition_count(TOPIC)

    def _local_log(self, partition: int) -> PartitionLog | None:
        """The local log of one partition, or None when it is not stored here. In a
        cluster the topic is the controller's to create, and may not exist yet."""
        topic = self.broker.catalog.get(TOPIC)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    async def replay(self) -> list[Replayed]:
        topic = await self._ensure_topic()
        out: list[Replayed] = []
        for plog in topic.partitions:
            if plog is not None:
                out.extend(await _read_log(plog, transactional=True))
        return out

    async def replay_partition(self, partition: int) -> list[Replayed]:
        """Every record of one partition, from its local log, with transactions."""
        if self._cluster() is None:
            await self._ensure_topic()
        plog = self._local_log(partition)
        if plog is None:
            raise NotCoordinator(f"{TOPIC}-{partition} is not stored on this broker")
        return await _read_log(plog, transactional=True)

    async def write(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> int:
        index, plog = await self._log_for(group_id)
        now = self.broker.now_ms()
        # A transaction's offsets: Kafka's TxnOffsetCommit batch carries the producer id
        # and epoch and no sequence, so the partition's producer state fences old epochs.
        batch = bytearray(
            builder.build_batch(
                [builder.Record(now, k, v) for k, v in records],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=producer_id >= 0,
            )
        )
        writer: PartitionWriter = self.broker.writer
        try:
            result = await writer.write(
                plog, TOPIC, index, batch, read_header(batch), now,
                AppendOrigin.COORDINATOR, REPLICATION_TIMEOUT_SECONDS,
            )
        except AppendRefused as exc:
            raise NotReplicated(exc.code, exc.message) from None
        return int(result.last_offset)

    async def _log_for(self, group_id: str) -> tuple[int, PartitionLog]:
        cluster = self._cluster()
        if cluster is None:
            topic = await self._ensure_topic()
            index = partition_for(group_id, self.num_partitions)
            return index, topic.partitions[index]
        count = cluster.partition_count(TOPIC)
        index = partition_for(group_id, count) if count else -1
        plog = self._local_log(index)
        # As Kafka's append to a partition this broker no longer leads: the client looks
        # the coordinator up again.
        if plog is None or not cluster.is_local_leader(TOPIC, index):
            raise NotCoordinator(f"group {group_id}: {TOPIC}-{index} is not led here")
        return index, plog


async def _read_log(plog: PartitionLog, *, transactional: bool = False) -> list[Any]:
    """The records of a partition as (key, value, position); with ``transactional`` as
    (key, value, position, producer_id, marker), markers included (see Replayed)."""
    out: list[Any] = []
    offset = plog.start_offset
    while offset < plog.end_offset:
        data = plog.read(offset, READ_CHUNK)
        if inspect.isawaitable(data):
            data = await data
        if not data:
            break
        # A partition loaded while the broker serves others must not stall them.
        await asyncio.sleep(0)
        progressed = False
        for pos, header in iter_batches(data):
            if header.last_offset < offset:
                continue
            progressed = True
            batch = bytes(data[pos : pos + header.size])
            if header.is_control:
                if transactional:
                    try:
                        marker, _ = read_marker(batch)
                    except InvalidMarker as exc:
                        log.warning("%s: skipping control batch at %d: %s", TOPIC, offset, exc)
                    else:
                        out.append((b"", None, header.base_offset, header.producer_id, marker))
            else:
                pid = header.producer_id if header.is_transactional else -1
                try:
                    for rec in iter_records(batch):
                        if rec.offset >= offset and rec.key is not None:
                            if transactional:
                                out.append((rec.key, rec.value, rec.offset, pid, None))
                            else:
                                out.append((rec.key, rec.value, rec.offset))
                except CorruptRecords as exc:
                    # One bad batch must not keep the broker from starting.
                    log.warning("%s: skipping batch at %d: %s", TOPIC, offset, exc)
            offset = header.last_offset + 1
        if not progressed:
            log.warning("%s: cannot read past offset %d", TOPIC, offset)
            break
    return out
