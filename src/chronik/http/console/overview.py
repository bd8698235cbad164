"""GET /console/api/overview: the cluster at a glance, from Metadata (brokers, the
controller, partitions and leaders per broker, under-replicated and offline partitions
of the topics the principal may describe) and DescribeLogDirs (disk use per broker,
null where the principal may not describe the cluster or the broker does not answer)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chronik.http.console.kafka import DESCRIBE_LOG_DIRS, KafkaSession, chunks, entity
from chronik.http.server import HttpError

MAX_LISTED = 100
# Disk use changes slowly; the overview, refreshed every few seconds, asks less often.
DISK_TTL = 10.0


async def overview(kafka: KafkaSession) -> dict[str, Any]:
    meta = await kafka.metadata()
    per_broker = {int(b.node_id): {"partitions": 0, "leaders": 0} for b in meta.brokers}
    partitions = 0
    under: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    under_count = offline_count = 0
    for topic in meta.topics:
        if int(topic.error_code):
            continue
        for p in topic.partitions:
            partitions += 1
            for replica in p.replica_nodes:
                if int(replica) in per_broker:
                    per_broker[int(replica)]["partitions"] += 1
            leader = int(p.leader_id)
            if leader in per_broker:
                per_broker[leader]["leaders"] += 1
            where = {"topic": topic.name, "partition": int(p.partition_index)}
            if leader < 0:
                offline_count += 1
                if len(offline) < MAX_LISTED:
                    offline.append(where)
            elif len(p.isr_nodes) < len(p.replica_nodes):
                under_count += 1
                if len(under) < MAX_LISTED:
                    under.append(where)
    disks = await disk_use(kafka, meta)
    brokers = [
        {
            "id": int(b.node_id),
            "host": b.host,
            "port": int(b.port),
            "rack": b.rack,
            **per_broker[int(b.node_id)],
            "disk_bytes": disk,
        }
        for b, disk in zip(meta.brokers, disks, strict=True)
    ]
    brokers.sort(key=lambda b: b["id"])
    under.sort(key=lambda w: (w["topic"], w["partition"]))
    offline.sort(key=lambda w: (w["topic"], w["partition"]))
    return {
        "cluster_id": meta.cluster_id,
        "controller": int(meta.controller_id),
        "brokers": brokers,
        "topics": sum(1 for t in meta.topics if not int(t.error_code)),
        "partitions": partitions,
        "under_replicated": under_count,
        "offline": offline_count,
        "under_replicated_partitions": under,
        "offline_partitions": offline,
    }


async def disk_use(kafka: KafkaSession, meta: Any) -> list[int | None]:
    """The bytes of the partitions each of ``meta``'s brokers holds (DescribeLogDirs,
    asked in chunks of partitions), kept DISK_TTL seconds per session; None for a broker
    that cannot tell (no DESCRIBE on the cluster, no answer)."""
    now = time.monotonic()
    cached = kafka.cache.get("disk")
    if cached is not None and now - cached[0] < DISK_TTL:
        found = cached[1]
    else:
        every: dict[str, list[int]] = {}
        for topic in meta.topics:
            if not int(topic.error_code):
                every[topic.name] = [int(p.partition_index) for p in topic.partitions]
        nodes = [int(b.node_id) for b in meta.brokers]
        sizes = await asyncio.gather(*(_held(kafka, n, every) for n in nodes))
        found = dict(zip(nodes, sizes, strict=True))
        kafka.cache["disk"] = (now, found)
    return [found.get(int(b.node_id)) for b in meta.brokers]


async def _held(kafka: KafkaSession, node: int, topics: dict[str, list[int]]) -> int | None:
    total = 0
    for part in chunks(topics):
        found = await _sizes(kafka, node, part)
        if found is None:
            return None
        total += sum(found.values())
    return total


async def _sizes(
    kafka: KafkaSession, node: int, topics: dict[str, list[int]]
) -> dict[tuple[str, int], int] | None:
    body = tuple(
        entity(DESCRIBE_LOG_DIRS, "DescribableLogDirTopic", topic=t, partitions=tuple(ps))
        for t, ps in topics.items()
    )
    try:
        response = await kafka.send(DESCRIBE_LOG_DIRS, node, topics=body)
    except HttpError:
        return None
    if int(response.error_code):
        return None
    out: dict[tuple[str, int], int] = {}
    for result in response.results:
        if int(result.error_code):
            continue
        for topic in result.topics:
            for p in topic.partitions:
                out[(topic.name, int(p.partition_index))] = int(p.partition_size)
    return out


async def log_sizes(
    kafka: KafkaSession, node: int, topics: dict[str, list[int]]
) -> dict[tuple[str, int], int]:
    """The size of each of ``topics``' partitions held by one broker (DescribeLogDirs);
    empty when it cannot be told."""
    out: dict[tuple[str, int], int] = {}
    for part in chunks(topics):
        out.update(await _sizes(kafka, node, part) or {})
    return out
