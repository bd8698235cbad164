"""Read one partition's offset range with librdkafka and hand it on as Arrow record batches.

The per-message work is a handful of C-level ``map`` calls over the consumed ``Message`` list
(one per column); every other step is a vectorised Arrow kernel.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain

import numpy as np
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from chronik.spark.options import quiet
from chronik.spark.schema import arrow_schema

CONSUME_BATCH = 50_000


class DataLossError(RuntimeError):
    pass


class _TooLarge(Exception):
    """A column passes Arrow's 2 GiB limit for 32-bit offsets: convert in halves."""


def _binary(values: list[bytes | None]) -> pa.Array:
    array = pa.array(values, pa.binary())
    if isinstance(array, pa.ChunkedArray):
        raise _TooLarge
    return array


def _offsets(msgs: list[Message]) -> np.ndarray:
    first, last = msgs[0].offset(), msgs[-1].offset()
    if last - first == len(msgs) - 1:  # offsets only grow: no gap, so no need to read each
        return np.arange(first, last + 1, dtype=np.int64)
    return np.fromiter(map(Message.offset, msgs), np.int64, len(msgs))


def messages_to_batch(
    msgs: list[Message],
    offsets: np.ndarray,
    topic: str,
    partition: int,
    schema: pa.Schema,
    include_headers: bool,
) -> pa.RecordBatch:
    n = len(msgs)
    # (type, millis) pairs flattened in C and split by stride, not transposed by zip(*...).
    stamps = np.fromiter(chain.from_iterable(map(Message.timestamp, msgs)), np.int64, 2 * n)
    # librdkafka numbers CreateTime 1 and LogAppendTime 2; Spark's column uses 0 and 1.
    ts_type = (stamps[0::2] - 1).astype(np.int32)
    columns = [
        _binary(list(map(Message.key, msgs))),
        _binary(list(map(Message.value, msgs))),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets),
        pa.array(stamps[1::2] * 1000).cast(schema.field("timestamp").type),
        pa.array(ts_type),
    ]
    if include_headers:
        columns.append(
            pa.array(list(map(Message.headers, msgs)), schema.field("headers").type)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _to_batches(
    msgs: list[Message],
    offsets: np.ndarray,
    topic: str,
    partition: int,
    schema: pa.Schema,
    include_headers: bool,
) -> list[pa.RecordBatch]:
    try:
        return [messages_to_batch(msgs, offsets, topic, partition, schema, include_headers)]
    except _TooLarge:
        if len(msgs) == 1:
            raise
        half = len(msgs) // 2
        return _to_batches(
            msgs[:half], offsets[:half], topic, partition, schema, include_headers
        ) + _to_batches(msgs[half:], offsets[half:], topic, partition, schema, include_headers)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A consumed batch is tens of thousands of fresh objects with no cycles; letting the cyclic
    # collector walk them repeatedly cost more than the conversion itself.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_range(
    conf: dict[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    poll_timeout_s: float = 120.0,
) -> Iterator[pa.RecordBatch]:
    """Yield the records with start <= offset < end, as Arrow batches in offset order."""
    if end <= start:
        return
    schema = arrow_schema(include_headers)
    conf = dict(conf)
    conf.setdefault("auto.offset.reset", "error")
    consumer = Consumer(quiet(conf))
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, start)])
        last_progress = time.monotonic()
        position = start
        done = False
        while not done:
            # Ask for no more than the range still holds: consume() waits for a full batch.
            want = max(1, min(CONSUME_BATCH, end - position))
            with _gc_paused():
                msgs = consumer.consume(num_messages=want, timeout=0.5)
                if msgs and any(map(Message.error, msgs)):
                    msgs, done = _without_events(
                        consumer, msgs, topic, partition, start, end, fail_on_data_loss
                    )
                batches: list[pa.RecordBatch] = []
                if msgs:
                    offsets = _offsets(msgs)
                    position = int(offsets[-1]) + 1
                    cut = int(np.searchsorted(offsets, end))
                    done = done or position >= end
                    if cut < len(msgs):
                        msgs, offsets = msgs[:cut], offsets[:cut]
                    if msgs:
                        batches = _to_batches(
                            msgs, offsets, topic, partition, schema, include_headers
                        )
            if msgs:
                last_progress = time.monotonic()
            elif not done and time.monotonic() - last_progress > poll_timeout_s:
                raise TimeoutError(
                    f"no records from {topic}-{partition} in {poll_timeout_s:.0f}s "
                    f"(reading offsets {position}..{end})"
                )
            yield from batches
    finally:
        consumer.close()


def _without_events(
    consumer: Consumer,
    msgs: list[Message],
    topic: str,
    partition: int,
    start: int,
    end: int,
    fail_on_data_loss: bool,
) -> tuple[list[Message], bool]:
    """Drop librdkafka's events from a consumed list; say whether the range is finished."""
    good, done = [], False
    for m in msgs:
        err = m.error()
        if err is None:
            good.append(m)
        elif err.code() == KafkaError._PARTITION_EOF:
            done = done or _ended_early(m, end, fail_on_data_loss, topic, partition)
        elif err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            if fail_on_data_loss:
                raise deleted(topic, partition, start)
            consumer.assign([KafkaTopicPartition(topic, partition, OFFSET_BEGINNING)])
        else:
            raise KafkaException(err)
    return good, done


def _ended_early(
    eof: Message, end: int, fail_on_data_loss: bool, topic: str, partition: int
) -> bool:
    # librdkafka reports EOF at the high watermark; offsets below it that never arrive were
    # compacted away or were control records, which is not data loss.
    if eof.offset() < end and fail_on_data_loss:
        raise truncated(topic, partition, eof.offset(), end)
    return True


def deleted(topic: str, partition: int, start: int) -> DataLossError:
    """Offsets to read were deleted (retention, DeleteRecords) and failOnDataLoss is on."""
    return DataLossError(
        f"offsets of {topic}-{partition} from {start} are no longer available "
        "(deleted by retention?); set failOnDataLoss=false to skip them"
    )


def truncated(topic: str, partition: int, at: int, end: int) -> DataLossError:
    """The partition ends before the planned end and failOnDataLoss is on."""
    return DataLossError(
        f"{topic}-{partition} ends at offset {at} but offsets up to {end} "
        "were planned; the partition was truncated. Set failOnDataLoss=false to go on."
    )
