# Idempotent and transactional producer state of one partition, and its snapshot format.
#
# Per producer id: the epoch, the metadata of its last 5 appended batches (sequence
# numbers per partition), the coordinator epoch of its last transaction marker and the
# first offset of its open transaction, checked and updated as Kafka's
# ProducerStateManager / ProducerAppendInfo do. The open transactions give the first
# unstable offset, which bounds the last stable offset (LSO).
#
# Snapshot file {offset:020d}.snapshot: the state as of that log offset (every batch
# below it applied), big-endian:
#   magic "CHPS", version int16 = 2, crc uint32 (CRC-32C of all bytes after it),
#   count int32, then per producer:
#     producer_id int64, epoch int16, last_timestamp int64, coordinator_epoch int32,
#     current_txn_first_offset int64 (-1: none), batches int8,
#     batches x (first_seq int32, last_seq int32, first_offset int64,
#                last_offset int64, timestamp int64)
# Version 1 (before transactions) lacks the two transaction fields and is still read.
# Written with tmp + fsync + rename, so a snapshot file is whole or absent. The directory
# is fsynced by the caller, the roll or clean close that takes the snapshot, with the other
# names it makes durable. A snapshot lost to a crash before that costs only time: recovery
# replays the log from an older one (one below any offset is always kept) or from the
# start of the log.
from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from chronik.records.batch import NO_SEQUENCE, BatchHeader
from chronik.storage.diskio import write_all
from chronik.storage.errors import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TRANSACTION_COORDINATOR_FENCED,
    ProducerStateError,
)

BATCHES_KEPT = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"CHPS"
_FILE_HEAD = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_PRODUCER_V1 = struct.Struct(">qhqb")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerEntry:
    __slots__ = (
        "epoch",
        "batches",
        "last_timestamp",
        "coordinator_epoch",
        "current_txn_first_offset",
    )

    def __init__(
        self,
        epoch: int,
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_KEPT)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id of each open transaction, in offset order (appends
        # only ever add a higher offset)
        self.ongoing: dict[int, int] = {}

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        return self._producers

    @producers.setter
    def producers(self, producers: dict[int, ProducerEntry]) -> None:
        self._producers = producers
        self.ongoing = {
            e.current_txn_first_offset: pid
            for pid, e in sorted(producers.items(), key=lambda p: p[1].current_txn_first_offset)
            if e.current_txn_first_offset >= 0
        }

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when none is open."""
        return next(iter(self.ongoing)) if self.ongoing else None

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        return sorted((pid, first) for first, pid in self.ongoing.items())

    # -- the checks made before an append -----------------------------------------------
    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """None if the batch may be appended, its original metadata if it is a duplicate
        of one of the producer's last 5 batches; raises ProducerStateError otherwise."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # No state (new producer, or its state expired or was deleted with the log):
            # current Kafka accepts any sequence here (KIP-360).
            return None
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"producer {header.producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise ProducerStateError(
                INVALID_TXN_STATE,
                f"producer {header.producer_id} has a transaction open on this partition:"
                " expected a transactional write",
            )
        first_seq = header.base_sequence
        if first_seq == NO_SEQUENCE:
            return None
        if epoch > entry.epoch:
            if first_seq != 0:
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {header.producer_id} new epoch {epoch} must start at sequence 0,"
                    f" got {first_seq}",
                )
            return None
        duplicate = entry.find_duplicate(first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate
        if entry.batches and not in_sequence(entry.batches[-1].last_seq, first_seq):
            raise ProducerStateError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {header.producer_id} expected sequence "
                f"{(entry.batches[-1].last_seq + 1) % 2**31}, got {first_seq}",
            )
        return None

    def update(self, header: BatchHeader, base_offset: int, timestamp_ms: int) -> None:
        """Record an appended batch (``header`` as sent; ``base_offset`` as assigned)."""
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
        elif header.producer_epoch > entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing[base_offset] = pid
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    base_offset,
                    base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )
        entry.last_timestamp = max(entry.last_timestamp, timestamp_ms)

    # -- transaction markers ------------------------------------------------------------
    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks before a marker is written: an older producer epoch is
        INVALID_PRODUCER_EPOCH, an older coordinator epoch TRANSACTION_COORDINATOR_FENCED."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} epoch {producer_epoch} is older than"
                f" {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch},"
                f" older than {entry.coordinator_epoch}",
            )

    def complete_marker(
        self, header: BatchHeader, kind: int, coordinator_epoch: int
    ) -> CompletedTxn:
        """``complete`` for a marker batch read from the log (kind 0 ABORT, 1 COMMIT)."""
        return self.complete(
            header.producer_id,
            header.producer_epoch,
            coordinator_epoch,
            header.base_offset,
            header.max_timestamp,
            kind == 0,
        )

    def complete(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        marker_offset: int,
        timestamp_ms: int,
        aborted: bool,
    ) -> CompletedTxn:
        """A marker was appended at ``marker_offset``: the producer's open transaction (if
        any) ends there."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        elif producer_epoch > entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        first = entry.current_txn_first_offset
        if first >= 0:
            self.ongoing.pop(first, None)
        else:
            first = marker_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp_ms)
        return CompletedTxn(producer_id, first, marker_offset, aborted)

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the next open transaction's first offset, or
        just past the marker (what Kafka records with an aborted transaction)."""
        unstable = self.first_unstable_offset()
        return completed.last_offset + 1 if unstable is None else unstable

    def replay(
        self, headers: Iterable[tuple[BatchHeader, tuple[int, int] | None]]
    ) -> list[CompletedTxn]:
        """Apply stored batches (baseOffset stamped) read back from the log at recovery,
        each with its marker (type, coordinator epoch) when it is a control batch; the
        aborted transactions found, with the LSO after each, for the transaction index."""
        found: list[CompletedTxn] = []
        for header, marker in headers:
            if header.producer_id < 0:
                continue
            if header.is_control:
                if marker is None:
                    continue
                kind, coordinator_epoch = marker
                done = self.complete_marker(header, kind, coordinator_epoch)
                if done.aborted:
                    found.append(done)
            else:
                self.update(header, header.base_offset, header.max_timestamp)
        return found

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms (never one with a
        transaction open, as Kafka keeps them)."""
        stale = [
            pid
            for pid, e in self.producers.items()
            if now_ms - e.last_timestamp >= expiration_ms and e.current_txn_first_offset < 0
        ]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    # -- snapshots ------------------------------------------------------------------------
    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid, e in self.producers.items():
            body += _PRODUCER.pack(
                pid,
                e.epoch,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
                len(e.batches),
            )
            for b in e.batches:
                body += _BATCH.pack(*b)
        return _FILE_HEAD.pack(_MAGIC, 2, crc32c(body)) + bytes(body)

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        magic, version, crc = _FILE_HEAD.unpack_from(data, 0)
        body = memoryview(data)[_FILE_HEAD.size :]
        if magic != _MAGIC or version not in (1, 2) or crc32c(body) != crc:
            raise ValueError("corrupt producer state snapshot")
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        producers: dict[int, ProducerEntry] = {}
        for _ in range(count):
            if version == 1:
                pid, epoch, last_ts, n = _PRODUCER_V1.unpack_from(body, pos)
                pos += _PRODUCER_V1.size
                entry = ProducerEntry(epoch, last_ts)
            else:
                pid, epoch, last_ts, coord_epoch, txn_first, n = _PRODUCER.unpack_from(body, pos)
                pos += _PRODUCER.size
                entry = ProducerEntry(epoch, last_ts, coord_epoch, txn_first)
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
        return producers

    def take_snapshot(self, offset: int) -> Path:
        path = snapshot_path(self.directory, offset)
        tmp = path.with_suffix(".snapshot.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, self.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk must not leave a torn .tmp behind
            raise
        return path

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = p.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def load_latest(self, max_offset: int) -> int:
        """Load the newest readable snapshot at or below ``max_offset``, delete any above
        it (they describe a log that was truncated), and return its offset (-1: none)."""
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.directory, offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                self.producers = self.decode(path.read_bytes())
                return offset
            except (ValueError, struct.error, OSError):
                path.unlink(missing_ok=True)
        return -1

    def delete_snapshots_below(self, offset: int, keep: int = 1) -> None:
        """Drop old snapshots below ``offset``, keeping the newest ``keep`` of them."""
        older = [o for o in self.snapshot_offsets() if o < offset]
        for o in older[: max(0, len(older) - keep)]:
            snapshot_path(self.directory, o).unlink(missing_ok=True)
