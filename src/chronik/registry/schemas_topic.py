"""The ``_schemas`` topic as the registry's log: one partition, compacted, created on the
first write (replicated as __consumer_offsets is in a cluster, by the controller), read
from this broker's own copy up to its high watermark, and appended to through the
partition writer (origin REGISTRY) by its leader, the registry's primary.

A broker that holds no copy (a cluster larger than the topic's replication factor)
reads nothing; its registry forwards every request to the primary instead.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from chronik.records import builder
from chronik.records.batch import read_header
from chronik.records.reader import CorruptRecords, iter_batches, iter_records
from chronik.registry import errors
from chronik.storage.partition_writer import AppendOrigin, AppendRefused, PartitionWriter

if TYPE_CHECKING:
    from chronik.storage.catalog import Catalog
    from chronik.storage.partition_log import PartitionLog

TOPIC = "_schemas"
READ_CHUNK = 1 << 20
POLL_SECONDS = 0.02


class RegistryCluster(Protocol):
    """What the registry asks of the cluster (chronik.cluster.node.ClusterNode)."""

    node_id: int

    def leader_of(self, topic: str, partition: int) -> int: ...

    def is_local_leader(self, topic: str, partition: int) -> bool: ...

    async def ensure_schemas_topic(self, timeout_ms: int) -> None: ...


class SchemasTopic:
    def __init__(
        self,
        catalog: Catalog,
        writer: PartitionWriter,
        cluster: RegistryCluster | None,
        now_ms: Callable[[], int],
        config: Mapping[str, str],
    ) -> None:
        self.catalog = catalog
        self.writer = writer
        self.cluster = cluster
        self._now_ms = now_ms
        self.segment_bytes = config.get("schema.registry.topic.segment.bytes", str(64 << 20))
        # The log last found, so the broker can tell cheaply whether an append it
        # wakes fetches for is one to _schemas.
        self.current_log: PartitionLog | None = None

    def _log(self) -> PartitionLog | None:
        topic = self.catalog.get(TOPIC)
        plog = topic.log(0) if topic is not None else None
        self.current_log = plog
        return plog

    def primary(self) -> int:
        """The broker id of the primary; -1 when none is known (no leader yet)."""
        if self.cluster is None:
            return 0
        return self.cluster.leader_of(TOPIC, 0)

    def forward_target(self) -> int | None:
        """The primary's broker id when it is another broker, else None."""
        if self.cluster is None:
            return None
        primary = self.cluster.leader_of(TOPIC, 0)
        return primary if primary >= 0 and primary != self.cluster.node_id else None

    def is_primary(self) -> bool:
        if self.cluster is None:
            return True
        return self.cluster.is_local_leader(TOPIC, 0)

    def has_copy(self) -> bool:
        return self._log() is not None

    async def ensure(self, timeout: float) -> None:
        if self.cluster is None:
            if self.catalog.get(TOPIC) is None:
                created = self.catalog.create_topic(
                    TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": self.segment_bytes}
                )
                if inspect.isawaitable(created):
                    await created
            return
        await self.cluster.ensure_schemas_topic(int(timeout * 1000))
        deadline = time.monotonic() + timeout
        while not self.is_primary():
            if time.monotonic() > deadline or self.primary() not in (-1, self.cluster.node_id):
                # Another broker leads: the caller forwards there.
                raise errors.NotPrimary()
            await asyncio.sleep(POLL_SECONDS * 5)

    async def committed_end(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            plog = self._log()
            if plog is None:
                raise errors.store_error("no local copy of _schemas")
            if plog.high_watermark >= plog.end_offset:
                return plog.end_offset
            if time.monotonic() > deadline:
                raise TimeoutError
            await asyncio.sleep(POLL_SECONDS)

    def readable_end(self) -> int:
        plog = self._log()
        return 0 if plog is None else plog.high_watermark

    def local_end(self) -> int:
        plog = self._log()
        return 0 if plog is None else plog.end_offset

    async def read(
        self, offset: int, end: int
    ) -> tuple[list[tuple[bytes | None, bytes | None, int]], int]:
        plog = self._log()
        if plog is None:
            return [], offset
        out: list[tuple[bytes | None, bytes | None, int]] = []
        offset = max(offset, plog.start_offset)
        while offset < end:
            data = plog.read(offset, READ_CHUNK)
            if inspect.isawaitable(data):
                data = await data
            if not data:
                break
            progressed = False
            for pos, header in iter_batches(data):
                if header.last_offset < offset:
                    continue
                progressed = True
                if not header.is_control:
                    try:
                        for rec in iter_records(bytes(data[pos : pos + header.size])):
                            if offset <= rec.offset < end:
                                out.append((rec.key, rec.value, rec.offset))
                    except CorruptRecords:
                        pass  # a batch the log's own checks let through is skipped
                offset = header.last_offset + 1
                if offset >= end:
                    break
            if not progressed:
                break
            # A long topic read at start must not stall the broker's other work.
            await asyncio.sleep(0)
        return out, min(offset, end)

    async def append(self, records: list[tuple[bytes, bytes | None]], timeout: float) -> int:
        plog = self._log()
        if plog is None or not self.is_primary():
            raise errors.NotPrimary()
        now = self._now_ms()
        batch = bytearray(builder.build_batch([builder.Record(now, k, v) for k, v in records]))
        try:
            result = await self.writer.write(
                plog, TOPIC, 0, batch, read_header(batch), now, AppendOrigin.REGISTRY, timeout
            )
        except AppendRefused as exc:
            raise errors.store_error(exc.message or f"Kafka error {exc.code}") from None
        return int(result.last_offset)
