"""Transaction markers on the partitions this broker leads.

The transaction coordinator ends a transaction by writing a commit or abort marker to
every partition in it: through MarkerWriter for the partitions its own broker leads, and
with WriteTxnMarkers (chronik.broker.apis.write_txn_markers, which uses a MarkerWriter
too) on the leaders of the others. A marker goes through the partition writer
(chronik.storage.partition_writer, origin MARKER) and is answered once it is durable as
an acks=all produce is (fsync; in a cluster, every in-sync replica has it). On a
partition of __consumer_offsets the group coordinator is told (``on_offsets_marker``), so
the transaction's offset commits become visible or go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from chronik.protocol import errors
from chronik.storage.partition_log import PartitionLog
from chronik.storage.partition_writer import AppendOrigin, PartitionWriter

log = logging.getLogger("chronik.transactions")

OFFSETS_TOPIC = "__consumer_offsets"
Partition = tuple[str, int]
# The local log of a partition this broker leads, or None and the error code.
Locate = Callable[[str, int], tuple[PartitionLog | None, int]]
# (partition of __consumer_offsets, producer id, commit): a marker there is durable.
OffsetsMarker = Callable[[int, int, bool], None]


class MarkerWriter:
    def __init__(
        self,
        writer: PartitionWriter,
        locate: Locate,
        now_ms: Callable[[], int],
        on_offsets_marker: OffsetsMarker | None = None,
    ) -> None:
        self.writer = writer
        self.locate = locate
        self.now_ms = now_ms
        self.on_offsets_marker = on_offsets_marker

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[Partition],
        timeout_s: float = 30.0,
    ) -> dict[Partition, int]:
        """The error code of each partition's marker (errors.NONE: written and durable)."""
        appended = self.append(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
        return await self.durable(appended, timeout_s)

    def append(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[Partition],
    ) -> Appended:
        """Step one of ``write``: the markers appended, nothing awaited (so that the
        markers of several transactions appended one after the other share fsyncs)."""
        done = Appended(producer_id, commit)
        writer = self.writer
        now = self.now_ms()
        for name, index in partitions:
            key = (name, index)
            plog, code = self.locate(name, index)
            if plog is None:
                done.results[key] = code
                continue
            refused = writer.refusal(name, index, AppendOrigin.MARKER)
            if refused is not None:
                done.results[key] = refused[0]
                continue
            try:
                result = writer.append_marker(
                    plog, producer_id, producer_epoch, coordinator_epoch, commit, now
                )
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                if code != errors.KAFKA_STORAGE_ERROR:  # a storage error is logged by the log
                    log.info(
                        "marker for producer %d on %s-%d refused: %s", producer_id, name, index, exc
                    )
                done.results[key] = code
                continue
            done.logs.append((key, plog, result.last_offset))
        return done

    async def durable(self, appended: Appended, timeout_s: float = 30.0) -> dict[Partition, int]:
        """Step two of ``write``: every fsync started (the appends all made before, so the
        fsync threads do not contend with them for the interpreter), then the wait."""
        writer = self.writer
        results = appended.results
        written: list[tuple[Partition, asyncio.Future[None] | None, int]] = []
        for key, plog, last in appended.logs:
            try:
                written.append((key, writer.start_sync(plog), last))
            except Exception as exc:  # the log is offline after a failed fsync
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                results[key] = code
        outcomes = await writer.durable_all(
            [(synced, key[0], key[1], last) for key, synced, last in written], timeout_s
        )
        for (key, _, _), outcome in zip(written, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                code = getattr(outcome, "code", None)
                if code is None:
                    raise outcome
                results[key] = code
                continue
            results[key] = outcome[0]
            told = self.on_offsets_marker
            if outcome[0] == errors.NONE and key[0] == OFFSETS_TOPIC and told is not None:
                told(key[1], appended.producer_id, appended.commit)
        return results


@dataclass
class Appended:
    """Markers of one transaction appended and not yet durable: the error code of each
    partition that took none, and the log and last offset of each that did."""

    producer_id: int
    commit: bool
    results: dict[Partition, int] = field(default_factory=dict)
    logs: list[tuple[Partition, PartitionLog, int]] = field(default_factory=list)
