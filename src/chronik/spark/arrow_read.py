"""Read one partition's offset range with librdkafka and hand it on as Arrow record batches.

The per-message work is a handful of C-level ``map`` calls over the consumed ``Message`` list
(one per column); every other step is a vectorised Arrow kernel.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from chronik.spark.schema import arrow_schema

CONSUME_BATCH = 50_000


class DataLossError(RuntimeError):
    pass


def messages_to_batch(
    msgs: list[Message], topic: str, partition: int, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    n = len(msgs)
    kinds, millis = zip(*map(Message.timestamp, msgs), strict=True)
    stamps = pc.multiply(pa.array(millis, pa.int64()), 1000)
    # librdkafka numbers CreateTime 1 and LogAppendTime 2; Spark's column uses 0 and 1.
    ts_type = pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32()))
    columns = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(Message.offset, msgs)), pa.int64()),
        stamps.cast(schema.field("timestamp").type),
        ts_type,
    ]
    if include_headers:
        columns.append(
            pa.array(list(map(Message.headers, msgs)), schema.field("headers").type)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


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
    consumer = Consumer(conf)
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, start)])
        last_progress = time.monotonic()
        while True:
            msgs = consumer.consume(num_messages=CONSUME_BATCH, timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > poll_timeout_s:
                    raise TimeoutError(
                        f"no records from {topic}-{partition} in {poll_timeout_s:.0f}s "
                        f"(reading offsets {start}..{end})"
                    )
                continue
            last_progress = time.monotonic()
            done = False
            if any(map(Message.error, msgs)):
                good = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good.append(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        done = done or _ended_early(m, end, fail_on_data_loss, topic, partition)
                    elif err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        if fail_on_data_loss:
                            raise DataLossError(
                                f"offsets of {topic}-{partition} from {start} are no longer "
                                "available (deleted by retention?); set failOnDataLoss=false "
                                "to skip them"
                            )
                        consumer.assign([KafkaTopicPartition(topic, partition, OFFSET_BEGINNING)])
                    else:
                        raise KafkaException(err)
                msgs = good
                if not msgs:
                    if done:
                        return
                    continue
            offsets = list(map(Message.offset, msgs))
            cut = bisect.bisect_left(offsets, end)
            if cut < len(msgs):
                msgs, done = msgs[:cut], True
            elif offsets[-1] >= end - 1:
                done = True
            if msgs:
                yield messages_to_batch(msgs, topic, partition, schema, include_headers)
            if done:
                return
    finally:
        consumer.close()


def _ended_early(
    eof: Message, end: int, fail_on_data_loss: bool, topic: str, partition: int
) -> bool:
    # librdkafka reports EOF at the high watermark; offsets below it that never arrive were
    # compacted away or were control records, which is not data loss.
    if eof.offset() >= end:
        return True
    if fail_on_data_loss:
        raise DataLossError(
            f"{topic}-{partition} ends at offset {eof.offset()} but offsets up to {end} "
            "were planned; the partition was truncated. Set failOnDataLoss=false to go on."
        )
    return True
