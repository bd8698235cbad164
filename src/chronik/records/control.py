# Transaction markers: the control batches that end a transaction on a partition.
#
# A marker is a record batch v2 with the transactional and control attributes set, the
# producer id and epoch of the transaction, base sequence -1, and one record:
#   key:   version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
#   value: version int16 (0), coordinator_epoch int32
# (Kafka's ControlRecordType and EndTransactionMarker; clients skip control batches and
# read the type from the key.)
from __future__ import annotations

import struct

from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.records.reader import CorruptRecords, iter_records

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class InvalidMarker(ValueError):
    """A control batch whose record is not a transaction marker."""


def build_marker(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp_ms: int,
) -> bytearray:
    record = Record(
        timestamp_ms,
        _KEY.pack(0, COMMIT if commit else ABORT),
        _VALUE.pack(0, coordinator_epoch),
    )
    return bytearray(
        build_batch(
            [record],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
            control=True,
        )
    )


def read_marker(batch: bytes | bytearray | memoryview, position: int = 0) -> tuple[int, int]:
    """(ABORT or COMMIT, coordinator epoch) of the control batch at ``position``."""
    header = read_header(batch, position)
    if not header.is_control:
        raise InvalidMarker(f"batch at offset {header.base_offset} is not a control batch")
    data = bytes(memoryview(batch)[position : position + header.size])
    try:
        records = list(iter_records(data))
    except CorruptRecords as exc:
        raise InvalidMarker(f"control batch at offset {header.base_offset}: {exc}") from None
    for rec in records:
        if rec.key is None or len(rec.key) < _KEY.size:
            raise InvalidMarker(f"control record at offset {rec.offset} has no marker key")
        _, kind = _KEY.unpack_from(rec.key)
        if kind not in (ABORT, COMMIT):
            raise InvalidMarker(f"control record type {kind} is not a transaction marker")
        epoch = -1
        if rec.value is not None and len(rec.value) >= _VALUE.size:
            _, epoch = _VALUE.unpack_from(rec.value)
        return kind, epoch
    raise InvalidMarker(f"control batch at offset {header.base_offset} holds no record")
