# Idempotent producer state of one partition, and its snapshot file format.
#
# Per producer id: the epoch and the metadata of its last 5 appended batches, checked as
# Kafka's ProducerStateManager / ProducerAppendInfo do (sequence numbers per partition).
#
# Snapshot file {offset:020d}.snapshot: the state as of that log offset (every batch
# below it applied), big-endian:
#   magic "CHPS", version int16 = 1, crc uint32 (CRC-32C of all bytes after it),
#   count int32, then per producer:
#     producer_id int64, epoch int16, last_timestamp int64, batches int8,
#     batches x (first_seq int32, last_seq int32, first_offset int64,
#                last_offset int64, timestamp int64)
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
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerStateError,
)

BATCHES_KEPT = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"CHPS"
_FILE_HEAD = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, last_timestamp: int = -1) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_KEPT)
        self.last_timestamp = last_timestamp

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
        self.producers: dict[int, ProducerEntry] = {}

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
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
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

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Apply stored batches (baseOffset stamped) read back from the log at recovery."""
        for header in headers:
            if header.producer_id >= 0:
                self.update(header, header.base_offset, header.max_timestamp)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle longer than producer.id.expiration.ms."""
        stale = [
            pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    # -- snapshots ------------------------------------------------------------------------
    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid, e in self.producers.items():
            body += _PRODUCER.pack(pid, e.epoch, e.last_timestamp, len(e.batches))
            for b in e.batches:
                body += _BATCH.pack(*b)
        return _FILE_HEAD.pack(_MAGIC, 1, crc32c(body)) + bytes(body)

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        magic, version, crc = _FILE_HEAD.unpack_from(data, 0)
        body = memoryview(data)[_FILE_HEAD.size :]
        if magic != _MAGIC or version != 1 or crc32c(body) != crc:
            raise ValueError("corrupt producer state snapshot")
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        producers: dict[int, ProducerEntry] = {}
        for _ in range(count):
            pid, epoch, last_ts, n = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            entry = ProducerEntry(epoch, last_ts)
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
