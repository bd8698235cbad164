"""Compaction beside DeleteRecords, DeleteTopics, delete-then-recreate, kill -9 and SIGTERM,
on a real `chronik serve` driven by confluent-kafka.

A compacted topic of many small segments is compacted every 100 ms; each action is fired
as soon as a pass's first .cleaned file appears in the partition directory, so it lands
while the pass runs on its worker thread.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.conftest import BrokerProcess

TOPIC = "ledger"
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
}
BROKER = {"log.retention.check.interval.ms": "100"}
TEMPORARY = (".cleaned", ".swap", ".tmp")
RECORDS = 4000  # per round: about a thousand segments, so a pass takes a while


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    deadline = time.monotonic() + 30
    while True:  # a just-deleted name may take a moment to be free again
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 1, config=CONFIGS)])[TOPIC].result(30)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _produce(bootstrap: str, tag: str, n: int, keys: int | None = 40) -> int:
    """``n`` acknowledged records valued ``tag:i``; keys repeat (``keys`` of them) so
    compaction has work, or are unique (None) so every record survives it."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "batch.num.messages": 4,
        }
    )
    acked = []
    for i in range(n):
        key = f"k{i % keys}" if keys else f"{tag}-{i}"
        producer.produce(
            TOPIC,
            key=key.encode(),
            value=f"{tag}:{i}".encode() + b"." * 60,
            on_delivery=lambda err, msg: acked.append(err is None),
        )
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert all(acked) and len(acked) == n
    return n


def _read(bootstrap: str) -> list[bytes]:
    return [value for _, value in _read_pairs(bootstrap)]


def _read_pairs(bootstrap: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    consumer.assign([TopicPartition(TOPIC, 0, low)])
    values: list[tuple[bytes, bytes]] = []
    offset = low
    deadline = time.monotonic() + 60
    while offset < high and time.monotonic() < deadline:
        for msg in consumer.consume(500, 1.0):
            if msg.error() is None:
                values.append((msg.key(), msg.value()))
                offset = msg.offset() + 1
    consumer.close()
    assert offset >= high, f"read up to {offset} of {high}"
    return values


def _partition_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / f"{TOPIC}-0"


def _temporaries(broker: BrokerProcess) -> list[str]:
    out = []
    for entry in broker.data_dir.iterdir():
        if entry.name.endswith("-delete"):
            out.append(entry.name)
        elif entry.is_dir():
            out += [f"{entry.name}/{p.name}" for p in entry.iterdir() if p.suffix in TEMPORARY]
    return out


def _await_pass(broker: BrokerProcess, timeout: float = 30) -> None:
    """Return as soon as a compaction pass has written its first .cleaned file."""
    directory = _partition_dir(broker)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(name.endswith(".cleaned") for name in os.listdir(directory)):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.001)
    raise AssertionError("no compaction pass started")


def _await_no_temporaries(broker: BrokerProcess, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _temporaries(broker):
        assert time.monotonic() < deadline, _temporaries(broker)
        time.sleep(0.05)


def _assert_quiet_log(broker: BrokerProcess) -> None:
    text = broker.log_text()
    assert "Traceback" not in text and "retention failed" not in text, text[-3000:]


@pytest.fixture
def compacting(broker_process_factory) -> BrokerProcess:
    broker = broker_process_factory(BROKER)
    _create(broker.bootstrap)
    return broker


def test_delete_records_during_compaction_passes(compacting: BrokerProcess) -> None:
    broker = compacting
    admin = _admin(broker.bootstrap)
    assert admin.list_topics(timeout=30).topics  # connected before the race
    high = 0
    for round_ in range(3):
        high += _produce(broker.bootstrap, f"r{round_}", RECORDS)
        cut = high - RECORDS // 4
        _await_pass(broker)
        done = admin.delete_records([TopicPartition(TOPIC, 0, cut)])
        for future in done.values():
            assert future.result(30).low_watermark == cut
        _await_no_temporaries(broker)
        values = _read(broker.bootstrap)
        assert values and all(v.startswith(f"r{round_}:".encode()) for v in values)
    _assert_quiet_log(broker)
    assert "compaction pass abandoned" in broker.log_text()


def test_topic_deleted_and_recreated_during_compaction_passes(compacting: BrokerProcess) -> None:
    broker = compacting
    admin = _admin(broker.bootstrap)
    assert admin.list_topics(timeout=30).topics  # connected before the race
    for round_ in range(3):
        _produce(broker.bootstrap, f"old{round_}", RECORDS)
        _await_pass(broker)
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        _create(broker.bootstrap)
        produced = _produce(broker.bootstrap, f"new{round_}", 50, keys=None)
        _await_no_temporaries(broker)
        values = _read(broker.bootstrap)
        assert len(values) == produced
        assert all(v.startswith(f"new{round_}:".encode()) for v in values)
    _assert_quiet_log(broker)
    assert "compaction pass abandoned" in broker.log_text()


@pytest.mark.slow
def test_kill_9_around_a_recreated_topic_keeps_only_its_own_records(
    compacting: BrokerProcess,
) -> None:
    broker = compacting
    rng = random.Random(14)
    admin = _admin(broker.bootstrap)
    for round_ in range(3):
        _produce(broker.bootstrap, f"old{round_}", RECORDS)
        _await_pass(broker)
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        _create(broker.bootstrap)
        produced = _produce(broker.bootstrap, f"new{round_}", 50, keys=None)
        time.sleep(rng.uniform(0, 0.3))  # the old pass ending, or a new one running
        broker.kill()
        broker.start()
        admin = _admin(broker.bootstrap)
        assert not [t for t in _temporaries(broker) if t.endswith("-delete")]
        values = _read(broker.bootstrap)
        assert len(values) == produced
        assert all(v.startswith(f"new{round_}:".encode()) for v in values)
        _await_no_temporaries(broker)
        admin.delete_topics([TOPIC])[TOPIC].result(30)
        _create(broker.bootstrap)
    _assert_quiet_log(broker)


def test_sigterm_during_a_big_compaction_exits_0_and_leaves_no_temporary_files(
    compacting: BrokerProcess,
) -> None:
    broker = compacting
    _produce(broker.bootstrap, "a", 3000, keys=300)
    _produce(broker.bootstrap, "b", 300, keys=300)  # supersedes every key: a big pass
    _await_pass(broker)
    started = time.monotonic()
    assert broker.terminate(timeout=30) == 0
    assert time.monotonic() - started < 15
    assert _temporaries(broker) == []
    assert "chronik broker stopped" in broker.log_text()
    _assert_quiet_log(broker)
    broker.start()
    latest = dict(_read_pairs(broker.bootstrap))
    assert len(latest) == 300 and all(v.startswith(b"b:") for v in latest.values())
