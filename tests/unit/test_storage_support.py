"""Builders shared by the storage unit tests (no tests of its own)."""
from __future__ import annotations

from pathlib import Path

from chronik.records.batch import validate_produced
from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_batches, iter_records
from chronik.storage.config import LogConfig
from chronik.storage.partition_log import AppendResult, PartitionLog

NOW = 1_700_000_000_000


def client_batch(
    n: int = 1,
    ts: int = NOW,
    value: bytes = b"v" * 40,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    key: bytes | None = b"k",
    codec: int = 0,
) -> bytearray:
    return bytearray(
        build_batch(
            [Record(ts + i, key, value) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            compression=codec,
        )
    )


def append(log: PartitionLog, batch: bytearray, now: int = NOW) -> AppendResult:
    return log.append(batch, validate_produced(batch, 1 << 24), now)


def small_config(**kw) -> LogConfig:
    base = dict(segment_bytes=1500, index_interval_bytes=200)
    base.update(kw)
    return LogConfig(**base)


def all_records(log: PartitionLog) -> list:
    """Every record from the log start, fetched the way a consumer does."""
    out = []
    offset = log.start_offset
    while offset < log.end_offset:
        data = log.read(offset, 700)
        assert data, offset
        last = None
        for pos, header in iter_batches(data):
            recs = iter_records(data[pos : pos + header.size])
            out.extend(r for r in recs if r.offset >= offset)
            last = header
        assert last is not None
        offset = last.last_offset + 1
    return out


def open_log(path: Path, config: LogConfig | None = None) -> PartitionLog:
    return PartitionLog.open(path, config or small_config(), now_ms=NOW)
