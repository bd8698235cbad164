"""Where a partition read spends its time, outside Spark: librdkafka consume vs. Arrow."""

from __future__ import annotations

import time

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from chronik.spark.arrow_read import CONSUME_BATCH, read_range
from chronik.spark.options import _READ_DEFAULTS


def _conf(bootstrap: str) -> dict[str, str]:
    return {**_READ_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": "bench"}


def profile_reader(bootstrap: str, topic: str, partition: int) -> dict[str, float]:
    probe = Consumer(_conf(bootstrap))
    _, end = probe.get_watermark_offsets(KafkaTopicPartition(topic, partition), timeout=30)
    probe.close()

    consumer = Consumer(_conf(bootstrap))
    consumer.assign([KafkaTopicPartition(topic, partition, 0)])
    start, seen = time.perf_counter(), 0
    while seen < end:
        msgs = consumer.consume(num_messages=min(CONSUME_BATCH, end - seen), timeout=1)
        seen += sum(1 for m in msgs if m.error() is None)
    consume_s = time.perf_counter() - start
    consumer.close()

    start = time.perf_counter()
    rows = sum(b.num_rows for b in read_range(_conf(bootstrap), topic, partition, 0, end))
    arrow_s = time.perf_counter() - start
    assert rows == end == seen, (rows, end, seen)
    return {
        "records": rows,
        "consume_rows_per_s": seen / consume_s,
        "arrow_rows_per_s": rows / arrow_s,
    }
