"""Nothing acknowledged is lost: kill -9 mid-produce, and a torn segment tail."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# A producer in its own process: acks=all, prints each acknowledged (value, offset).
PRODUCER = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "linger.ms": 2,
                  "enable.idempotence": True, "message.timeout.ms": 60000})
    def done(err, msg):
        if err is None:
            print(msg.value().decode(), msg.offset(), flush=True)
    i = 0
    while True:
        p.produce("crash", value=str(i).encode(), on_delivery=done)
        p.poll(0)
        i += 1
        if i % 200 == 0:
            p.flush(5)
    """
)


def create(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def read_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 60
) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                got.append((msg.offset(), msg.value()))
    consumer.close()
    return got


@pytest.mark.slow
def test_kill_9_during_acks_all_loses_nothing_acknowledged(broker_process, tmp_path: Path) -> None:
    create(broker_process.bootstrap, "crash")
    out = tmp_path / "acked.txt"
    with open(out, "w") as sink:
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, broker_process.bootstrap], stdout=sink
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if out.stat().st_size > 40_000:
                break
        broker_process.kill()
        time.sleep(0.5)
        producer.kill()
        producer.wait()
    acked = [line.split() for line in out.read_text().splitlines() if line.strip()]
    assert len(acked) > 1000, "producer made too little progress to test anything"
    broker_process.start()
    records = read_all(broker_process.bootstrap, "crash", len(acked))
    by_offset = dict(records)
    for value, offset in acked:
        assert by_offset.get(int(offset)) == value.encode(), f"acknowledged record {value} lost"
    offsets = [o for o, _ in records]
    assert offsets == list(range(len(offsets))), "offsets must be dense and in order"
    values = [v for _, v in records]
    assert len(values) == len(set(values)), "an idempotent producer's record was duplicated"


def test_torn_tail_is_truncated_to_the_intact_prefix(broker_process) -> None:
    from confluent_kafka import Producer

    create(broker_process.bootstrap, "torn")
    producer = Producer({"bootstrap.servers": broker_process.bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce("torn", value=f"record-{i}".encode())
        producer.flush(10)  # one batch per record
    assert broker_process.terminate() == 0
    segment = broker_process.data_dir / "torn-0" / f"{0:020d}.log"
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size - 7)  # tear the last batch
    broker_process.start()
    records = read_all(broker_process.bootstrap, "torn", 19, timeout=20)
    assert [v for _, v in records] == [f"record-{i}".encode() for i in range(19)]
    # new appends continue right after the intact prefix
    producer = Producer({"bootstrap.servers": broker_process.bootstrap})
    delivered = []
    producer.produce("torn", value=b"after", on_delivery=lambda e, m: delivered.append(m.offset()))
    producer.flush(10)
    assert delivered == [19]
