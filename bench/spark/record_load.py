"""Fill a topic fast: confluent-kafka with large batches and a long linger."""

from __future__ import annotations

import os

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def produce_records(bootstrap: str, topic: str, count: int, size: int, keys: int) -> None:
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 50,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "acks": "1",
    })
    payload = os.urandom(size)
    key_bytes = [f"key-{k:06d}".encode() for k in range(keys)]
    produce = producer.produce
    for i in range(count):
        while True:
            try:
                produce(topic, payload, key_bytes[i % keys])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("records left undelivered")
