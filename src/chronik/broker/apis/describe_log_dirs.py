"""DescribeLogDirs (API key 35), versions 1-4: this broker's log directory and the size of
each partition it stores (kafka-log-dirs.sh, Cruise Control, `chronik cluster
rebalance` for the bytes a move copies).

A broker has one log directory, its data dir: one result, with every local partition
(or those named), its size in bytes (the segment files), and offset_lag as Kafka gives
it: how far the log end is behind the high watermark (a follower catching up), never
negative; is_future_key is always false (no AlterReplicaLogDirs). v4's total_bytes and
usable_bytes are the volume's, from statvfs. Named topics or partitions not stored here
are left out, as in Kafka. It needs DESCRIBE on the Cluster: without it every result is
CLUSTER_AUTHORIZATION_FAILED (v3+ also top-level), as Kafka's KafkaApis.
"""

from __future__ import annotations

import os
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation

API_KEY = 35
VERSIONS = (1, 4)


def _sizes(
    catalog: Any, named: dict[str, set[int]] | None
) -> dict[str, list[tuple[int, int, int]]]:
    """Topic -> [(partition, size in bytes, offset lag)] of the local partitions."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name in sorted(catalog.topics if named is None else named):
        topic = catalog.get(name)
        if topic is None:
            continue
        for index, plog in enumerate(topic.partitions):
            if plog is None or plog.closed:
                continue
            if named is not None and index not in named[name]:
                continue
            lag = max(plog.stored_high_watermark - plog.end_offset, 0)
            out.setdefault(name, []).append((index, plog.size_bytes, lag))
    return out


def _volume(path: str) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    catalog = broker.catalog
    log_dir = str(catalog.data_dir.resolve())
    total, usable = _volume(log_dir)
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        code = errors.CLUSTER_AUTHORIZATION_FAILED
        result = ctx.build("DescribeLogDirsResult", error_code=code, log_dir=log_dir,
                           topics=(), total_bytes=-1, usable_bytes=-1)
        return ctx.build("DescribeLogDirsResponse", throttle_time=0, error_code=code,
                         results=(result,))
    named: dict[str, set[int]] | None = None
    if request.topics is not None:
        named = {}
        for topic in request.topics:
            named.setdefault(topic.topic, set()).update(int(p) for p in topic.partitions)
    topics = tuple(
        ctx.build(
            "DescribeLogDirsTopic",
            name=name,
            partitions=tuple(
                ctx.build("DescribeLogDirsPartition", partition_index=p, partition_size=size,
                          offset_lag=lag, is_future_key=False)
                for p, size, lag in parts
            ),
        )
        for name, parts in _sizes(catalog, named).items()
    )
    result = ctx.build("DescribeLogDirsResult", error_code=errors.NONE, log_dir=log_dir,
                       topics=topics, total_bytes=total, usable_bytes=usable)
    return ctx.build("DescribeLogDirsResponse", throttle_time=0, error_code=errors.NONE,
                     results=(result,))
