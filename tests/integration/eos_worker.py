"""A consume-transform-produce worker for the exactly-once tests, run as its own process
so a test can kill -9 it anywhere:

    python -m tests.integration.eos_worker BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

It reads INPUT (read_committed, every partition assigned, positions from GROUP's
committed offsets), writes each value prefixed with "out-" to OUTPUT, and sends its
input offsets in the same transaction. It prints IN_TXN once a transaction's records are
on the broker, OFFSETS_SENT once its offsets are too, and COMMITTED n after each commit,
so the test can kill it inside a transaction at either point.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str) -> None:
    # EOS_WORKER_DEBUG=eos,protocol (librdkafka's debug contexts) logs to stderr.
    debug = {"debug": os.environ["EOS_WORKER_DEBUG"]} if os.environ.get("EOS_WORKER_DEBUG") else {}
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **debug}
    )
    # Fences any earlier worker of this id and aborts its open transaction.
    producer.init_transactions(60)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(source, timeout=30)
    partitions = sorted(metadata.topics[source].partitions)
    consumer.assign([TopicPartition(source, p) for p in partitions])
    print("READY", flush=True)
    while True:
        msgs = [m for m in consumer.consume(num_messages=50, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=b"out-" + m.value())
        producer.flush(30)
        print("IN_TXN", flush=True)
        time.sleep(0.02)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        print("OFFSETS_SENT", flush=True)
        time.sleep(0.02)
        producer.commit_transaction(30)
        print("COMMITTED", len(msgs), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
