"""Where a partition read spends its time, outside Spark: librdkafka consume vs. Arrow, and
the Fetch reader that replaces both.

One pass over a partition with librdkafka: each consume() call and each conversion to an Arrow
batch is timed on its own; then the whole librdkafka read_range() and the Fetch reader's
read_range() are timed over the same records.
"""

from __future__ import annotations

import gc
import time

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from chronik.spark import fetch_read
from chronik.spark.arrow_read import CONSUME_BATCH, _offsets, messages_to_batch, read_range
from chronik.spark.options import _READ_DEFAULTS
from chronik.spark.schema import arrow_schema


def _conf(bootstrap: str) -> dict[str, str]:
    return {**_READ_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": "bench"}


def profile_reader(bootstrap: str, topic: str, partition: int) -> dict[str, float]:
    probe = Consumer(_conf(bootstrap))
    _, end = probe.get_watermark_offsets(KafkaTopicPartition(topic, partition), timeout=30)
    probe.close()

    schema = arrow_schema(False)
    consumer = Consumer(_conf(bootstrap))
    consumer.assign([KafkaTopicPartition(topic, partition, 0)])
    consume_s = convert_s = 0.0
    seen = 0
    gc.disable()
    try:
        while seen < end:
            t0 = time.perf_counter()
            msgs = consumer.consume(num_messages=min(CONSUME_BATCH, end - seen), timeout=1)
            t1 = time.perf_counter()
            msgs = [m for m in msgs if m.error() is None]
            if msgs:
                offsets = _offsets(msgs)
                messages_to_batch(msgs, offsets, topic, partition, schema, False)
            t2 = time.perf_counter()
            consume_s += t1 - t0
            convert_s += t2 - t1
            seen += len(msgs)
    finally:
        gc.enable()
        consumer.close()

    start = time.perf_counter()
    rows = sum(b.num_rows for b in read_range(_conf(bootstrap), topic, partition, 0, end))
    read_s = time.perf_counter() - start
    assert rows == end == seen, (rows, end, seen)

    def fetch_pass() -> int:
        return sum(b.num_rows for b in fetch_read.read_range(
            _conf(bootstrap), topic, partition, 0, end, include_headers=False,
            fail_on_data_loss=True, poll_timeout_s=60, fallback=read_range,
        ))

    fetch_pass()  # the first pass may compile the decoder
    start = time.perf_counter()
    assert fetch_pass() == end
    fetch_s = time.perf_counter() - start
    return {
        "fetch_reader_rows_per_s": rows / fetch_s,
        "records": rows,
        "consume_ns_per_record": consume_s / rows * 1e9,
        "arrow_ns_per_record": convert_s / rows * 1e9,
        "read_range_rows_per_s": rows / read_s,
    }
