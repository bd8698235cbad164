"""Kafka's replica assignment (AdminUtils.assignReplicasToBrokers), as CreateTopics and
CreatePartitions place new partitions (rack-unaware) and `kafka-reassign-partitions
--generate` proposes moves: pure logic, no I/O.

Without racks: first replicas round-robin from a random broker, the other replicas
shifted further at each round so followers spread. With a rack for every broker: the
same round-robin over a rack-alternated broker list (one broker of each rack in turn),
skipping for followers any broker whose rack already holds a replica of the partition
while some rack holds none, so a partition spans min(replication factor, racks) racks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping


class AssignmentError(ValueError):
    """The brokers cannot take the partitions as asked."""


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    start_index: int = -1,
    start_partition: int = 0,
) -> dict[int, list[int]]:
    """Partition -> replicas over `brokers` (id -> rack, or None without one); rack-aware
    when every broker has a rack. A negative `start_index` starts at a random broker."""
    if partitions <= 0:
        raise AssignmentError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise AssignmentError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    racks = [rack for rack in brokers.values() if rack is not None]
    if not racks:
        return rack_unaware(partitions, replication_factor, list(brokers), start_index,
                            start_partition)
    if len(racks) != len(brokers):
        raise AssignmentError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    rack_of = {b: r for b, r in brokers.items() if r is not None}
    return _rack_aware(rack_of, partitions, replication_factor, start_index, start_partition)


def _replica_index(first: int, shift: int, index: int, n: int) -> int:
    return (first + 1 + (shift + index) % (n - 1)) % n


def rack_unaware(
    partitions: int,
    factor: int,
    brokers: list[int],
    start_index: int = -1,
    start_partition: int = 0,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment (assignReplicasToBrokersRackUnaware): first
    replicas round-robin from a random broker, followers shifted so leaders and
    followers spread evenly."""
    brokers = sorted(brokers)
    n = len(brokers)
    start = start_index if start_index >= 0 else random.randrange(n)
    shift = start_index if start_index >= 0 else random.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        out[partition] = [brokers[first]] + [
            brokers[_replica_index(first, shift, j, n)] for j in range(factor - 1)
        ]
        partition += 1
    return out


def rack_alternated(rack_of: Mapping[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: racks in name order, one broker of each in
    turn, each rack's brokers in id order."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(rack_of):
        out.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return out


def _rack_aware(
    rack_of: Mapping[int, str], partitions: int, factor: int, start_index: int,
    start_partition: int,
) -> dict[int, list[int]]:
    arranged = rack_alternated(rack_of)
    n = len(arranged)
    racks = len(set(rack_of.values()))
    start = start_index if start_index >= 0 else random.randrange(n)
    shift = start_index if start_index >= 0 else random.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {rack_of[leader]}
        k = 0
        for _ in range(factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * racks, k, n)]
                rack = rack_of[broker]
                k += 1
                if (rack not in used_racks or len(used_racks) == racks) and (
                    broker not in replicas or len(replicas) == n
                ):
                    replicas.append(broker)
                    used_racks.add(rack)
                    break
        out[partition] = replicas
        partition += 1
    return out
