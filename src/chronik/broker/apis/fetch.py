"""Fetch (API key 1), versions 4-16.

Records are served as the bytes stored in the segment files, whole batches only (on a
plaintext connection sent from the file with sendfile, chronik.storage.file_region),
within the request's max_bytes and the broker's fetch.max.bytes, and within each
partition's partition_max_bytes; only the first batch of the first partition with
data may exceed them (KIP-74), so a consumer always progresses. A fetch with fewer
than min_bytes available waits up to max_wait_ms, woken early by appends.
Fetch sessions (KIP-227), from v7, as Kafka's FetchManager keeps them
(chronik.broker.fetch_sessions): a full fetch at session_epoch 0 opens a session when
the cache has room (max.incremental.fetch.session.cache.slots) and answers its id; an
incremental one (its id, the next epoch) names only the partitions added or changed and
those to forget (by name v7-12, by topic id v13+), reads every partition of the
session, and answers only those with records, a changed high watermark, last stable
offset or log start offset, or an error. An unknown session answers
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, a session used
across v13 FETCH_SESSION_TOPIC_ID_ERROR; epoch -1 (and v4-6) is sessionless.

Consumers read only below the high watermark; with isolation_level=1 (read_committed)
only below the last stable offset, and each partition answers the aborted transactions
of the range it may return (KIP-98), from the segments' transaction indexes.
In a cluster the high watermark is the in-sync replicas'. A fetch with a replica id
(v4-14 replica_id, v15+ replica_state) is a follower's: it tells the leader the
follower's log end offset (chronik.cluster.replica_manager) and reads up to the leader's
log end; a partition under a leader replication throttle gets no records while the throttle's
rate is over (chronik.cluster.replication_quota).

Authorization as Kafka's KafkaApis: a consumer needs READ on each Topic (else its
partitions answer TOPIC_AUTHORIZATION_FAILED with no records, the others are served); a
follower CLUSTER_ACTION on the Cluster (else every partition TOPIC_AUTHORIZATION_FAILED).
Checked once per topic per request, before any wait.

A consumer's response counts against its consumer_byte_rate quota, if one applies
(chronik.broker.quota_manager), as Kafka's: the fetch size is capped to what the quota's window
span may carry, and a response that takes the rate over the quota is answered empty (and
not counted) with the throttle time, the connection not read until it has passed
(KIP-219; before Fetch v8 the response itself waits that long). A throttled answer
leaves the fetch session as it was (and a full fetch opens none), as Kafka's does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import UUID

from chronik.broker.context import RequestContext
from chronik.broker.fetch_sessions import TopicKey, Wanted
from chronik.broker.quota_manager import CLIENT_THROTTLES
from chronik.broker.topics import data_partition, leader_epoch, topic_by_id
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.protocol.fetch_response import PartitionResult, TopicResult, encode_fetch_response
from chronik.security.acl_model import Operation, ResourceType
from chronik.security.quota_configs import CONSUMER_BYTE_RATE

API_KEY = 1
VERSIONS = (4, 16)


def _resolve(ctx: RequestContext, key: TopicKey) -> tuple[Any, str, Any]:
    """The topic a fetch names: by name before v13, by id from v13."""
    if isinstance(key, UUID):
        cluster = ctx.services.cluster
        if cluster is not None:
            view = cluster.view.topic_by_id(key)
            name = view.name if view is not None else ""
            return ctx.services.catalog.get(name), name, key
        topic = topic_by_id(ctx.services, key)
        return topic, (topic.name if topic else ""), key
    topic = ctx.services.catalog.get(key)
    return topic, key, (topic.topic_id if topic else None)


def _replica_id(request: Any) -> int:
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _epoch_error(ctx: RequestContext, name: str, index: int, epoch: int) -> int:
    """KIP-320: a fetch naming another leader epoch than the partition's is refused."""
    if epoch < 0 or ctx.services.cluster is None:
        return errors.NONE
    current = leader_epoch(ctx.services, name, index)
    if epoch < current:
        return errors.FENCED_LEADER_EPOCH
    if epoch > current:
        return errors.UNKNOWN_LEADER_EPOCH
    return errors.NONE


def _read_all(
    ctx: RequestContext,
    wanted: Wanted,
    committed: bool,
    budget: int,
    replica_id: int,
    refused: dict[str, bool],
) -> tuple[list[TopicResult], int, bool, list[Any]]:
    """One pass over the partitions to read: one TopicResult per topic of ``wanted``,
    one PartitionResult per partition, in its order. ``refused`` holds each topic's
    authorization (True: not allowed) once decided, so a waiting fetch decides once."""
    topics: list[TopicResult] = []
    total = 0
    failed = False
    logs: list[Any] = []
    missing = (
        errors.UNKNOWN_TOPIC_ID if ctx.api_version >= 13 else errors.UNKNOWN_TOPIC_OR_PARTITION
    )
    cluster = ctx.services.cluster
    replicas = cluster.replicas if cluster is not None else None
    resolved: dict[TopicKey, tuple[Any, str, Any]] = {}
    # Record bytes named, not read, where the connection sends them with sendfile.
    sendfile = ctx.sendfile
    for key, fetch_partitions in wanted:
        found = resolved.get(key)
        if found is None:
            found = resolved[key] = _resolve(ctx, key)
        topic, name, topic_id = found
        parts: list[PartitionResult] = []
        denied = refused.get(name)
        if denied is None:
            # A follower was checked for the whole request (CLUSTER_ACTION); a topic id
            # that names no topic is UNKNOWN_TOPIC_ID (below), as Kafka answers it.
            denied = refused[name] = (
                replica_id < 0
                and bool(name)
                and not ctx.allowed(Operation.READ, ResourceType.TOPIC, name)
            )
        if denied:
            parts = [
                PartitionResult(fp.partition, errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, b"")
                for fp in fetch_partitions
            ]
            topics.append(TopicResult(name, topic_id, parts))
            continue
        for fp in fetch_partitions:
            index = fp.partition
            plog, code = data_partition(ctx.services, topic, name, index)
            if plog is None:
                if code == errors.UNKNOWN_TOPIC_OR_PARTITION:
                    code = missing
                parts.append(PartitionResult(index, code, -1, -1, -1, b""))
                failed = True
                continue
            offset = fp.fetch_offset
            epoch = getattr(fp, "current_leader_epoch", -1)
            if replicas is not None and replica_id >= 0:
                code = replicas.follower_fetch(name, index, replica_id, offset, epoch)
            else:
                code = _epoch_error(ctx, name, index, epoch)
            if code != errors.NONE:
                parts.append(PartitionResult(index, code, -1, -1, -1, b""))
                failed = True
                continue
            logs.append(plog)
            end = plog.end_offset
            start = plog.start_offset
            hw = plog.high_watermark
            lso = plog.last_stable_offset
            # A follower reads all the leader has; a consumer what the ISR has, and a
            # read_committed one no open transaction.
            upto = None if replica_id >= 0 else lso if committed else hw
            if offset < start or offset > end:
                code = errors.OFFSET_OUT_OF_RANGE
                if offset > end and cluster is not None and not cluster.lease_held():
                    # Without its ZooKeeper lease this broker may no longer lead: past its
                    # end may be records of a new leader, and a consumer told "out of
                    # range" would reset to earliest and commit what it re-read.
                    code = errors.NOT_LEADER_OR_FOLLOWER
                # Empty, not null, records: as Kafka answers, and as librdkafka insists.
                parts.append(PartitionResult(index, code, hw, lso, start, b""))
                failed = True
                continue
            records = b""
            remaining = budget - total
            # KIP-74, as Kafka's ReplicaManager reads: only the first batch of the first
            # partition with data may go over the request's and the partition's limits.
            min_one = total == 0
            stop = end if upto is None else min(upto, end)
            # A replication throttle (chronik.cluster.replication_quota) may hold it back.
            held = replicas is not None and replica_id >= 0 and offset < stop and (
                replicas.leader_throttled(name, index, replica_id))
            if offset < stop and (remaining > 0 or min_one) and not held:
                limit = min(fp.partition_max_bytes, remaining)
                records = plog.read(offset, limit, min_one, stop if stop < end else None,
                                    sendfile)
                total += len(records)
            aborted = plog.aborted_in_read(offset, stop) if committed and records else None
            if committed and aborted is None:
                aborted = []
            parts.append(PartitionResult(index, errors.NONE, hw, lso, start, records, aborted))
        topics.append(TopicResult(name, topic_id, parts))
    return topics, total, failed, logs


def _refused_follower(ctx: RequestContext, wanted: Wanted) -> list[TopicResult]:
    """A follower's fetch without CLUSTER_ACTION: every partition refused."""
    topics = []
    for key, fetch_partitions in wanted:
        _, name, topic_id = _resolve(ctx, key)
        parts = [
            PartitionResult(fp.partition, errors.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1, b"")
            for fp in fetch_partitions
        ]
        topics.append(TopicResult(name, topic_id, parts))
    return topics


async def handle(ctx: RequestContext, request: Any) -> list[bytes]:
    version = ctx.api_version
    await ctx.wait_throttled()
    broker = ctx.services
    replica_id = _replica_id(request)
    context = broker.fetch_sessions.new_context(version, request, replica_id >= 0)
    if context.error != errors.NONE:
        return encode_fetch_response(version, [], context.error)
    wanted = context.wanted
    if replica_id >= 0 and not ctx.allowed_on_cluster(Operation.CLUSTER_ACTION):
        code, session_id, topics = context.response(_refused_follower(ctx, wanted), True)
        return encode_fetch_response(version, topics, code, session_id)
    committed = replica_id < 0 and getattr(request, "isolation_level", 0) == 1
    refused: dict[str, bool] = {}
    max_wait = millis(request.max_wait) / 1000
    deadline = time.monotonic() + max_wait
    wanted_bytes = request.max_bytes if request.max_bytes > 0 else 2**31 - 1
    wanted_bytes = min(wanted_bytes, broker.config.fetch_max_bytes)
    quotas = broker.quotas
    limited = replica_id < 0 and quotas.limited(CONSUMER_BYTE_RATE, ctx.principal, ctx.client_id)
    if limited:
        cap = quotas.max_value_in_window(CONSUMER_BYTE_RATE, ctx.principal, ctx.client_id)
        if cap is not None:
            wanted_bytes = min(wanted_bytes, cap)
    while True:
        # What the broker's memory budget has left, so that responses shrink (to one
        # batch at least) rather than memory growing when many fetches are large.
        budget = broker.memory_pool.room(wanted_bytes)
        read, total, failed, logs = _read_all(ctx, wanted, committed, budget, replica_id, refused)
        remaining = deadline - time.monotonic()
        if (
            failed
            or total >= request.min_bytes
            or total > 0
            and request.min_bytes <= 1
            or remaining <= 0
            or not logs
        ):
            break
        await broker.wait_for_append(logs, remaining, replica_id >= 0)
    if replica_id >= 0 and broker.cluster is not None:
        broker.cluster.replicas.quotas.leader_sent(read)
    # Sized first without touching the session: a throttled answer leaves it as it was.
    code, session_id, topics = context.response(read, not limited)
    response = encode_fetch_response(version, topics, code, session_id)
    if limited:
        size = sum(map(len, response))
        throttle_ms = quotas.record(CONSUMER_BYTE_RATE, ctx.principal, ctx.client_id, size)
        if throttle_ms:
            # As Kafka: an empty response, and what it would have carried not counted.
            quotas.unrecord(CONSUMER_BYTE_RATE, ctx.principal, ctx.client_id, size)
            ctx.throttle(throttle_ms)
            if version < CLIENT_THROTTLES[CONSUMER_BYTE_RATE]:
                await asyncio.sleep(throttle_ms / 1000)
            code, session_id = context.throttled()
            return encode_fetch_response(version, [], code, session_id, throttle_ms=throttle_ms)
        code, session_id, topics = context.response(read, True)
        response = encode_fetch_response(version, topics, code, session_id)
    broker.metrics.bytes_out(total)
    return response
