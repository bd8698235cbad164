"""Transaction markers on the partitions this broker leads.

The transaction coordinator ends a transaction by writing a commit or abort marker to
every partition in it: through this function for the partitions its own broker leads,
and with WriteTxnMarkers (broker/write_txn_markers.py, which calls it too) on the leaders
of the others. A marker is answered once it is durable as an acks=all produce is (fsync;
in a cluster, every in-sync replica has it). On a partition of __consumer_offsets the
group coordinator is told, so the transaction's offset commits become visible or go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from chronik.broker.topics import data_partition
from chronik.protocol import errors

log = logging.getLogger("chronik.transactions")

OFFSETS_TOPIC = "__consumer_offsets"
Partition = tuple[str, int]


async def write_markers(
    broker: Any,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    partitions: Iterable[Partition],
    timeout_s: float = 30.0,
) -> dict[Partition, int]:
    """The error code of each partition's marker (errors.NONE: written and durable)."""
    results: dict[Partition, int] = {}
    written: list[tuple[Partition, Any, int]] = []
    cluster = broker.cluster
    replicas = cluster.replicas if cluster is not None else None
    now = broker.now_ms()
    for name, index in partitions:
        key = (name, index)
        plog, code = data_partition(broker, broker.catalog.get(name), name, index)
        if plog is None:
            results[key] = code
            continue
        if replicas is not None and replicas.not_enough_replicas(name, index) is not None:
            results[key] = errors.NOT_ENOUGH_REPLICAS
            continue
        try:
            result = plog.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            if code != errors.KAFKA_STORAGE_ERROR:  # a storage error is logged by the log
                log.info(
                    "marker for producer %d on %s-%d refused: %s", producer_id, name, index, exc
                )
            results[key] = code
            continue
        broker.notify_append(plog)
        written.append((key, plog, result.last_offset))
    outcomes = await asyncio.gather(
        *(_durable(broker, replicas, key, plog, last, timeout_s) for key, plog, last in written),
        return_exceptions=True,
    )
    coordinator = broker.coordinator
    for (key, _, _), outcome in zip(written, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            code = getattr(outcome, "code", None)
            if code is None:
                raise outcome
            results[key] = code
            continue
        results[key] = outcome
        if outcome == errors.NONE and key[0] == OFFSETS_TOPIC:
            complete = getattr(coordinator, "complete_transaction", None)
            if complete is not None:
                complete(key[1], producer_id, commit)
    return results


async def _durable(
    broker: Any, replicas: Any, key: Partition, plog: Any, last_offset: int, timeout: float
) -> int:
    if replicas is None:
        await broker.committer.sync(plog)
        return errors.NONE
    _, (code, _) = await asyncio.gather(
        broker.committer.sync(plog),
        replicas.wait_replicated(key[0], key[1], last_offset + 1, timeout),
    )
    return code
