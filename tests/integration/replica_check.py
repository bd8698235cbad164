"""What each replica of a partition holds, read straight from the broker's data dir, and
the checks of Kafka's replication promise: every acknowledged record is present exactly
once, in order, at one offset on every replica.

A replica is the partition directory `{topic}-{partition}` in a broker's data dir, its
segments `{base:020d}.log` holding record batches v2 back to back (the layout of
chronik.storage.partition_log). Segments are read in base-offset order and each whole
batch is taken; a torn tail (a broker writing as we read) is left out. Replicas are
compared by their batches' bytes, not their files: where a segment rolls is each
broker's own business.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chronik.records.batch import BatchHeader
from chronik.records.reader import iter_batches, iter_records

SEGMENT_SUFFIX = ".log"


@dataclass(frozen=True)
class Stored:
    """One record of a replica."""

    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Acked:
    """A record the producer was told is written: the offset its delivery report gave,
    None when the report gave none (librdkafka acknowledges a batch implicitly, without
    its offsets, when a batch after it is acknowledged while it waits to be retried)."""

    partition: int
    offset: int | None
    key: bytes | None
    value: bytes


def segment_files(partition_dir: Path) -> list[Path]:
    """The partition's segments, ascending base offsets (names are zero-padded)."""
    return sorted(
        p for p in partition_dir.glob(f"*{SEGMENT_SUFFIX}") if p.stem.isdigit() and p.is_file()
    )


def replica_batches(
    partition_dir: Path, upto: int | None = None
) -> list[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every whole batch whose base offset is below `upto` (all when
    None), in log order."""
    out: list[tuple[BatchHeader, bytes]] = []
    for segment in segment_files(partition_dir):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            if upto is not None and header.base_offset >= upto:
                return out
            out.append((header, data[pos : pos + header.size]))
    return out


def replica_bytes(partition_dir: Path, upto: int | None = None) -> bytes:
    """The replica's batches below `upto`, concatenated: two replicas that agree up to
    `upto` return the same bytes."""
    return b"".join(data for _, data in replica_batches(partition_dir, upto))


def replica_records(partition_dir: Path, upto: int | None = None) -> list[Stored]:
    """[(offset, key, value)] of the replica's records below `upto` (control batches left
    out), in log order."""
    out: list[Stored] = []
    for header, data in replica_batches(partition_dir, upto):
        if header.is_control:
            continue
        for record in iter_records(data):
            if upto is not None and record.offset >= upto:
                break
            out.append(Stored(record.offset, record.key, record.value))
    return out


def log_end_offset(partition_dir: Path) -> int:
    """One past the last whole batch's last offset (0 for an empty replica)."""
    batches = replica_batches(partition_dir)
    return batches[-1][0].last_offset + 1 if batches else 0


def assert_replicas_agree(dirs: Mapping[int, Path], upto: int) -> list[Stored]:
    """Every replica holds the same batches, byte for byte, below `upto`, and they reach
    it (nothing missing at the end); returns their records."""
    assert dirs, "no replica to compare"
    reference_id, reference_dir = next(iter(dirs.items()))
    expected = replica_bytes(reference_dir, upto)
    for broker_id, d in dirs.items():
        got = replica_bytes(d, upto)
        if got != expected:
            raise AssertionError(
                f"replica on broker {broker_id} differs from broker {reference_id} below "
                f"offset {upto}: {describe_difference(reference_dir, d, upto)}"
            )
    records = replica_records(reference_dir, upto)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets repeat or go back within a replica"
    batches = replica_batches(reference_dir, upto)
    reached = batches[-1][0].last_offset + 1 if batches else 0
    assert reached >= upto, f"replicas end at {reached}, below {upto}"
    return records


def describe_difference(a: Path, b: Path, upto: int) -> str:
    """The first batch where two replicas part, for a failure message."""
    left, right = replica_batches(a, upto), replica_batches(b, upto)
    for (ha, da), (hb, db) in zip(left, right, strict=False):
        if da != db:
            return (
                f"first difference at batch base {ha.base_offset} (epoch "
                f"{ha.partition_leader_epoch}, {ha.records_count} records) vs base "
                f"{hb.base_offset} (epoch {hb.partition_leader_epoch}, "
                f"{hb.records_count} records)"
            )
    return f"{len(left)} batches against {len(right)}"


def assert_acknowledged_present(
    acked: Iterable[Acked], replicas: Mapping[int, Mapping[int, list[Stored]]]
) -> None:
    """Each acknowledged record is, on every replica of its partition, at the offset its
    acknowledgement gave (if it gave one) and nowhere else, and a key's records keep their
    send order.

    `acked` is in send order; `replicas`: partition -> broker id -> that replica's
    records (replica_records)."""
    by_value: dict[int, dict[int, dict[bytes | None, list[int]]]] = {}
    at_offset: dict[int, dict[int, dict[int, Stored]]] = {}
    for partition, per_broker in replicas.items():
        for broker_id, records in per_broker.items():
            values: dict[bytes | None, list[int]] = defaultdict(list)
            for r in records:
                values[r.value].append(r.offset)
            by_value.setdefault(partition, {})[broker_id] = values
            at_offset.setdefault(partition, {})[broker_id] = {r.offset: r for r in records}

    last_offset_of_key: dict[tuple[int, bytes | None], int] = {}
    for a in acked:
        assert a.partition in replicas, f"partition {a.partition} not read"
        offset = a.offset
        for broker_id in replicas[a.partition]:
            offsets = by_value[a.partition][broker_id].get(a.value, [])
            where = f"partition {a.partition} on broker {broker_id}"
            assert offsets, f"acknowledged {a.value!r} (offset {a.offset}) missing from {where}"
            assert len(offsets) == 1, f"{a.value!r} {len(offsets)} times in {where}: {offsets}"
            assert a.offset is None or offsets[0] == a.offset, (
                f"{a.value!r} acknowledged at offset {a.offset}, at {offsets[0]} in {where}"
            )
            stored = at_offset[a.partition][broker_id][offsets[0]]
            assert stored.key == a.key, f"key of {a.value!r} in {where}: {stored.key!r}"
            offset = offsets[0]
        if offset is None:
            continue  # no replica read
        previous = last_offset_of_key.get((a.partition, a.key))
        assert previous is None or previous < offset, (
            f"key {a.key!r} on partition {a.partition}: {a.value!r} at {offset}, "
            f"after one sent before it at {previous}"
        )
        last_offset_of_key[(a.partition, a.key)] = offset


def replica_dirs(cluster: Any, topic: str, partition: int) -> dict[int, Path]:
    """Broker id -> the partition's directory on that broker, for each assigned replica
    (a tests.integration.cluster_support.Cluster)."""
    return {
        i: cluster.partition_dir(i, topic, partition)
        for i in cluster.assignment(topic)[partition]
    }


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's high watermark as its leader reports it (ListOffsets latest)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "replica-check"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


def assert_no_duplicates(records: Iterable[Stored], where: str) -> None:
    """No value twice in one replica (the tests' values are unique)."""
    seen: dict[bytes | None, int] = {}
    for r in records:
        assert r.value not in seen, f"{r.value!r} at {seen[r.value]} and {r.offset} in {where}"
        seen[r.value] = r.offset
