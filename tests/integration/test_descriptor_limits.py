"""Descriptors stay bounded by the file cache, not by partitions or segments, and admin
requests that would create too many partitions get an error: a broker process under
RLIMIT_NOFILE 1024 keeps accepting connections and serving records throughout."""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from chronik.records.builder import Record, build_batch
from conftest import BrokerProcess

NOFILE = 1024
# The cache takes half the limit (512) by default; the rest of the broker (sockets, the
# log, the event loop, a few transient files) stays well under another 128.
FD_BOUND = NOFILE // 2 + 128


def limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def descriptors(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


@pytest.fixture
def starved(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", preexec_fn=limit_descriptors).start()
    try:
        yield broker
    finally:
        broker.kill()


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker: BrokerProcess, name: str, partitions: int, **config: str) -> None:
    admin = admin_for(broker)  # held: a dropped client cancels its futures
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config)], operation_timeout=60, request_timeout=60
    )
    futures[name].result(timeout=90)


def round_trip(broker: BrokerProcess, topic: str, partitions: list[int]) -> None:
    """A new producer and a new consumer (new connections) move one record per partition."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for p in partitions:
        producer.produce(topic, value=f"v-{p}".encode(), partition=p)
    assert producer.flush(30) == 0
    for p in partitions:
        got = read(broker, topic, p, 0, 1)
        assert [v for _, v in got] == [f"v-{p}".encode()], p


def read(
    broker: BrokerProcess, topic: str, partition: int, offset: int, count: int
) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "fds", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                got.append((msg.offset(), msg.value()))
    consumer.close()
    return got


def assert_accepts_connections(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5):
        pass
    metadata = admin_for(broker).list_topics(timeout=10)
    assert metadata.brokers


def test_400_partitions_under_1024_descriptors(starved: BrokerProcess) -> None:
    create(starved, "wide", 400)
    assert_accepts_connections(starved)
    round_trip(starved, "wide", [0, 1, 133, 266, 398, 399])
    assert len(admin_for(starved).list_topics("wide", timeout=10).topics["wide"].partitions) == 400
    assert descriptors(starved) <= FD_BOUND
    assert "Traceback" not in starved.log_text()


def test_create_partitions_to_20000_is_refused_with_a_message(starved: BrokerProcess) -> None:
    create(starved, "grow", 1)
    admin = admin_for(starved)
    futures = admin.create_partitions(
        [NewPartitions("grow", 20_000)], operation_timeout=60, request_timeout=60
    )
    with pytest.raises(KafkaException) as refused:
        futures["grow"].result(timeout=60)
    error = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert "max.partitions.per.request" in error.str()
    assert_accepts_connections(starved)
    assert len(admin_for(starved).list_topics("grow", timeout=10).topics["grow"].partitions) == 1
    # Within the limits, growing far past what 1024 descriptors could hold open works.
    futures = admin.create_partitions(
        [NewPartitions("grow", 600)], operation_timeout=60, request_timeout=60
    )
    futures["grow"].result(timeout=90)
    round_trip(starved, "grow", [0, 300, 599])
    assert descriptors(starved) <= FD_BOUND
    assert "Traceback" not in starved.log_text()


def test_the_broker_partition_limit_refuses_with_a_message(tmp_path: Path) -> None:
    # __consumer_offsets' 50 partitions count too: 50 + 60 + 40 is the limit exactly.
    broker = BrokerProcess(tmp_path / "data", {"max.broker.partitions": "150"}).start()
    try:
        create(broker, "first", 60)
        admin = admin_for(broker)
        futures = admin.create_topics([NewTopic("second", 60, 1)])
        with pytest.raises(KafkaException) as refused:
            futures["second"].result(timeout=30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert "max.broker.partitions" in error.str()
        create(broker, "second", 40)
        round_trip(broker, "second", [39])
    finally:
        broker.kill()


def write_topic_as_left_on_disk(
    data_dir: Path, name: str, segments: int, keys: int, configs: dict[str, str]
) -> None:
    """A one-partition topic of ``segments`` closed segments of one record each, written
    in Kafka's layout as a broker would have left it (an empty offset index, as every
    segment is under index.interval.bytes, and the time index entry a roll writes), so the
    test spends no time in thousands of rolls."""
    part = data_dir / f"{name}-0"
    part.mkdir(parents=True)
    now_ms = int(time.time() * 1000)  # recent: retention.ms must not take them first
    for i in range(segments + 1):  # the last one is the (empty) active segment
        records = [Record(now_ms + i, b"k%d" % (i % keys), b"%06d" % i, ())]
        batch = build_batch(records, base_offset=i) if i < segments else b""
        (part / f"{i:020d}.log").write_bytes(batch)
        (part / f"{i:020d}.index").write_bytes(b"")
        entry = struct.pack(">qi", now_ms + i, 0) if i < segments else b""
        (part / f"{i:020d}.timeindex").write_bytes(entry)
    meta = data_dir / ".meta"
    meta.mkdir(exist_ok=True)
    (meta / f"{name}.json").write_text(
        json.dumps(
            {"name": name, "topic_id": str(uuid.uuid4()), "partitions": 1, "configs": configs}
        )
    )


def test_reading_thousands_of_segments_and_compacting_them_keeps_descriptors_bounded(
    tmp_path: Path,
) -> None:
    segments = 5_000
    data_dir = tmp_path / "data"
    write_topic_as_left_on_disk(data_dir, "many", segments, segments, {})
    compacted = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    write_topic_as_left_on_disk(data_dir, "squeezed", 1_100, 50, compacted)
    broker = BrokerProcess(
        data_dir, {"log.retention.check.interval.ms": "200"}, preexec_fn=limit_descriptors
    ).start()
    try:
        # A consumer reads every one of the 5,000 closed segments from offset 0 while the
        # cleaner, from its first check on, reads and rewrites the 1,100 segments of the
        # compacted topic on a worker thread; descriptors are sampled all along.
        got: list[tuple[int, bytes]] = []
        reader = threading.Thread(target=lambda: got.extend(read(broker, "many", 0, 0, segments)))
        reader.start()
        deadline = time.monotonic() + 90
        peak = 0
        while time.monotonic() < deadline:
            peak = max(peak, descriptors(broker))
            if (
                not reader.is_alive()
                and not list((data_dir / "squeezed-0").glob("*.swap"))
                and _compacted(data_dir / "squeezed-0")
            ):
                break
            time.sleep(0.05)
        reader.join()
        assert [v for _, v in got] == [b"%06d" % i for i in range(segments)]
        assert _compacted(data_dir / "squeezed-0")
        latest = read(broker, "squeezed", 0, 0, 50)
        assert sorted(v for _, v in latest)[-1] == b"%06d" % (1_100 - 1)
        assert peak <= FD_BOUND and descriptors(broker) <= FD_BOUND, peak
        assert_accepts_connections(broker)
        assert "retention failed" not in broker.log_text()
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def _compacted(partition_dir: Path) -> bool:
    """The cleaner has swapped its copies in: most segments are now empty files."""
    sizes = [p.stat().st_size for p in partition_dir.glob("*.log")]
    return sum(1 for size in sizes if size == 0) > len(sizes) // 2
