"""Produce (API key 0), versions 0-11.

Authorization as Kafka's KafkaApis: a request with a transactional id needs WRITE on
that TransactionalId (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and
each topic WRITE on the Topic (else TOPIC_AUTHORIZATION_FAILED for its partitions, which
are not appended, whether the topic exists or not).

Each request's size counts against the client's producer_byte_rate quota, if one applies
(chronik.broker.quota_manager): over it, the response carries the throttle time and the
connection is not read until it has passed (nor a request read before it started).

Appends go through the partition writer (chronik.storage.partition_writer) as a
client's: in a cluster a leader that may have lost its ZooKeeper session (its lease)
writes nothing (NOT_LEADER_OR_FOLLOWER, the client looks the leader up again), and
acks=all is refused NOT_ENOUGH_REPLICAS below min.insync.replicas.

Versions 0-2 may carry message formats v0/v1: those are converted to one record
batch v2 (as Kafka up-converts), the only case where records are decoded. A batch
is validated as bytes (header, CRC, offsets) and appended with its offset
stamped in place; nothing of it is decoded. Only a topic whose compression.type
names a codec other than the batch's has the records section recompressed.

A topic with confluent.key.schema.validation or confluent.value.schema.validation has
each batch's keys or values checked against the schema registry
(chronik.broker.schema_validation): a batch with a record that fails is refused whole,
INVALID_RECORD with record_errors, as a compacted topic refuses keyless records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.quota_manager import CLIENT_THROTTLES
from chronik.broker.topics import INTERNAL_TOPICS, data_partition
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.protocol.produce_response import (
    PartitionResult,
    TopicResult,
    encode_produce_response,
)
from chronik.records.batch import InvalidBatch, validate_produced
from chronik.records.legacy import is_legacy, up_convert
from chronik.records.reader import keyless_records
from chronik.records.recompress import recompress, target_codec
from chronik.security.acl_model import Operation, ResourceType
from chronik.security.quota_configs import PRODUCER_BYTE_RATE
from chronik.storage.partition_log import PartitionLog
from chronik.storage.partition_writer import AppendOrigin

API_KEY = 0
VERSIONS = (0, 11)
# The connection may start the next Produce once this one has appended.
PIPELINED = True


def eager(request: Any) -> bool:
    """Whether the connection may run handle() on its own turn of the event loop
    (chronik.broker.connection._run_now): anything but acks=all, whose wait for the
    in-sync replicas enters an asyncio.timeout. What else may wait (a quota's throttle,
    a schema lookup) enters none."""
    return request.acks != -1


log = logging.getLogger("chronik.produce")


async def handle(
    ctx: RequestContext, request: Any, release: Callable[[], None]
) -> list[bytes] | None:
    if ctx.throttled is not None and ctx.throttled.until:
        await ctx.wait_throttled()
    # Kafka's producer quota: the request's size counted as the request is taken up, and
    # over the quota the connection held for the throttle time (KIP-219). On a connection
    # Kafka works on one request at a time, so the next one only starts after this one's
    # throttle, as here.
    broker = ctx.services
    throttle_ms = broker.quotas.record(PRODUCER_BYTE_RATE, ctx.principal, ctx.client_id, ctx.size)
    if throttle_ms:
        ctx.throttle(throttle_ms)
    acks = request.acks
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is not None and not ctx.allowed(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        release()
        if acks == 0:
            return None
        await _hold(ctx, throttle_ms)
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        refused = [
            (t.name, [_error(p.index, code) for p in t.partition_data]) for t in request.topic_data
        ]
        return encode_produce_response(ctx.api_version, refused, throttle_ms)
    now = broker.now_ms()
    results: list[TopicResult] = []
    synced: list[tuple[PartitionLog, int, int, str, int, int]] = []
    writer = broker.writer
    for topic_data in request.topic_data:
        name = topic_data.name
        partitions: list[PartitionResult] = []
        if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, name):
            partitions = [
                _error(p.index, errors.TOPIC_AUTHORIZATION_FAILED)
                for p in topic_data.partition_data
            ]
            results.append((name, partitions))
            continue
        topic = broker.catalog.get(name)
        for part in topic_data.partition_data:
            index = part.index
            if acks not in (-1, 0, 1):
                partitions.append(_error(index, errors.INVALID_REQUIRED_ACKS))
                continue
            partition_log, code = data_partition(broker, topic, name, index)
            if partition_log is None:
                partitions.append(_error(index, code))
                continue
            if name in INTERNAL_TOPICS:  # Kafka refuses client appends to them
                message = f"Cannot append to internal topic {name}"
                partitions.append(_error(index, errors.INVALID_TOPIC_EXCEPTION, message))
                continue
            refused = writer.refusal(name, index, AppendOrigin.CLIENT, acks)
            if refused is not None:
                partitions.append(_error(index, *refused))
                continue
            records = part.records
            try:
                if records is None:
                    raise InvalidBatch(errors.CORRUPT_MESSAGE, "null record set")
                if ctx.api_version < 3 and is_legacy(records):
                    records = up_convert(records)
                batch = bytearray(records)
                log_config = topic.log_config
                header = validate_produced(batch, log_config.max_message_bytes)
                if log_config.compact:
                    _check_keys(batch, name, index)
                if log_config.schema_validation:
                    # The bytes as they came (the same as the batch until it is stamped).
                    await broker.schema_validator.check(records, header, name, index, log_config)
                codec = target_codec(log_config.compression_type)
                if codec is not None and codec != header.compression:
                    batch, header = recompress(batch, header, codec)
                result = writer.append(partition_log, name, batch, header, now, AppendOrigin.CLIENT)
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                if isinstance(exc, InvalidBatch):
                    code = exc.code_for(ctx.api_version)
                if code != errors.KAFKA_STORAGE_ERROR:  # logged once by the partition
                    log.info("rejected produce to %s-%d: %s", name, index, exc)
                partitions.append(_error(index, code, str(exc), getattr(exc, "record_errors", ())))
                continue
            synced.append(
                (partition_log, len(results), len(partitions), name, index, result.last_offset)
            )
            partitions.append(
                (
                    index,
                    errors.NONE,
                    result.base_offset,
                    result.log_append_time,
                    result.log_start_offset,
                    None,
                    (),
                )
            )
        results.append((name, partitions))
    release()
    if acks == -1 and synced:
        timeout = millis(request.timeout) / 1000
        outcomes: list[Any]
        if len(synced) == 1:
            # No task and no gather for the common case of one partition per request.
            plog, _, _, name, index, last = synced[0]
            try:
                outcomes = [await writer.durable(plog, name, index, last, timeout)]
            except Exception as exc:
                outcomes = [exc]
        else:
            outcomes = await asyncio.gather(
                *(
                    writer.durable(plog, name, index, last, timeout)
                    for plog, _, _, name, index, last in synced
                ),
                return_exceptions=True,
            )
        for (_, t, i, *_), outcome in zip(synced, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                # The fsync failed (logged once by the partition): not acknowledged.
                code = getattr(outcome, "code", None)
                if code is None:
                    raise outcome
                results[t][1][i] = _error(results[t][1][i][0], code, str(outcome))
            elif outcome[0] != errors.NONE:
                results[t][1][i] = _error(results[t][1][i][0], *outcome)
    if acks == 0:
        return None
    if throttle_ms:
        await _hold(ctx, throttle_ms)
    return encode_produce_response(ctx.api_version, results, throttle_ms)


async def _hold(ctx: RequestContext, throttle_ms: int) -> None:
    """A client older than Produce v6 does not throttle itself: its response waits."""
    if throttle_ms and ctx.api_version < CLIENT_THROTTLES[PRODUCER_BYTE_RATE]:
        await asyncio.sleep(throttle_ms / 1000)


def _error(
    index: int,
    code: int,
    message: str | None = None,
    record_errors: tuple[tuple[int, str | None], ...] = (),
) -> PartitionResult:
    return (index, code, -1, -1, -1, message, record_errors)


def _check_keys(batch: bytearray, topic: str, index: int) -> None:
    """Kafka's LogValidator: a compacted topic refuses records without a key, naming each
    one by its index in the batch (the client fails those, and retries none of the batch)."""
    try:
        keyless = keyless_records(batch)
    except Exception as exc:  # a malformed record section, or a codec that fails on it
        raise InvalidBatch(errors.CORRUPT_MESSAGE, f"malformed records: {exc}") from None
    if not keyless:
        return
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}."
    record_errors = tuple((i, why) for i in keyless)
    raise InvalidBatch(
        errors.INVALID_RECORD,
        f"One or more records have been rejected due to {len(keyless)} record errors in total,"
        f" and only showing the first three errors at most: {list(record_errors[:3])}",
        record_errors,
    )
