# Records of the internal compacted topic __transaction_state, byte for byte as Kafka
# encodes them (TransactionLogKey / TransactionLogValue, version 0), big-endian:
#
#   key:   version int16 (0), transactional_id string (int16 length + UTF-8)
#   value: version int16 (0), producer_id int64, producer_epoch int16,
#          transaction_timeout_ms int32, transaction_status int8,
#          transaction_partitions nullable array (int32 count, -1 null) of
#            (topic string, partition_ids array of int32),
#          transaction_last_update_timestamp_ms int64,
#          transaction_start_timestamp_ms int64
#   a null value (tombstone) removes an expired transactional id.
#
# transaction_status: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
# 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence.
# A transactional id's records go to partition abs(javaHash(id)) % partitions, like a
# group's to __consumer_offsets.
from __future__ import annotations

import struct

from chronik.coordinator.transaction_state import TxnMetadata, TxnState

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


class InvalidTxnRecord(ValueError):
    """A __transaction_state record this coordinator cannot read."""


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (size,) = _I16.unpack_from(data, pos)
    pos += 2
    if size < 0 or pos + size > len(data):
        raise InvalidTxnRecord("string runs past the record")
    return data[pos : pos + size].decode(), pos + size


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != 0:
            raise InvalidTxnRecord(f"key version {version}")
        return _read_string(data, 2)[0]
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidTxnRecord(str(exc)) from None


def encode_value(txn: TxnMetadata) -> bytes:
    out = bytearray(
        _VALUE_HEAD.pack(0, txn.producer_id, txn.producer_epoch, txn.timeout_ms, txn.state.id)
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions))
        out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMES.pack(txn.last_update_ms, txn.txn_start_ms)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    try:
        version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(data, 0)
        if version != 0:
            raise InvalidTxnRecord(f"value version {version}")
        pos = _VALUE_HEAD.size
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(topics, 0)):
            topic, pos = _read_string(data, pos)
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(max(count, 0)):
                partitions.add((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
        last_update, start = _TIMES.unpack_from(data, pos)
        return TxnMetadata(
            transactional_id,
            pid,
            epoch,
            TxnState.from_id(status),
            timeout,
            start,
            last_update,
            partitions,
        )
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidTxnRecord(str(exc)) from None

