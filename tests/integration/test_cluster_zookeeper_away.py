"""ZooKeeper paused under a running cluster: reads go on, writes wait (a leader without
its ZooKeeper lease acknowledges nothing), admin requests fail fast with
REQUEST_TIMED_OUT rather than hang, and everything works again once it is back."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from conftest import start_zookeeper
from integration.cluster_support import SESSION_TIMEOUT_MS


@pytest.fixture
def own_zookeeper(tmp_path):
    """A ZooKeeper of this test's own: it is paused, which the session's must not be."""
    zk = start_zookeeper(tmp_path / "zookeeper")
    try:
        yield zk
    finally:
        if zk.proc is not None and zk.proc.poll() is None:
            os.kill(zk.proc.pid, signal.SIGCONT)
        zk.stop()


def _create(admin, name, partitions, timeout=20.0):
    futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout)
    futures[name].result()


def test_zookeeper_paused_reads_go_on_writes_wait_admin_fails_fast_then_recovers(
    own_zookeeper, tmp_path
):
    from integration.cluster_support import Cluster

    cluster = Cluster(tmp_path / "cluster", own_zookeeper.connect, 2)
    try:
        cluster.start()
        admin = cluster.admin(1)
        _create(admin, "steady", 4)
        cluster.wait_topic("steady", 4)
        os.kill(own_zookeeper.proc.pid, signal.SIGSTOP)
        time.sleep(1.0)

        started = time.monotonic()
        with pytest.raises(KafkaException) as refused:
            _create(admin, "while-away", 2)
        assert refused.value.args[0].name() == "REQUEST_TIMED_OUT"
        assert time.monotonic() - started < 15

        # Reads go on: what the ISR holds is still served.
        reader = Consumer({"bootstrap.servers": cluster.broker(1).bootstrap,
                           "group.id": "unused", "enable.auto.commit": False})
        try:
            for p in range(4):
                reader.get_watermark_offsets(TopicPartition("steady", p), timeout=10)
        finally:
            reader.close()

        # Writes wait: past a third of the session timeout without ZooKeeper a leader
        # may have lost its session (its lease), and acknowledges nothing. A new
        # idempotent producer still gets a producer id, and its records are retried
        # until ZooKeeper is back.
        for i in (1, 2):
            cluster.wait_until(
                lambda i=i: "ZooKeeper connection lost" in cluster.log_text(i),
                f"broker {i} noticing ZooKeeper is away", 30,
            )
        time.sleep(SESSION_TIMEOUT_MS / 3000 + 0.5)
        producer = Producer({"bootstrap.servers": cluster.broker(2).bootstrap,
                             "enable.idempotence": True, "message.timeout.ms": 120_000})
        for i in range(400):
            producer.produce("steady", key=str(i).encode(), value=str(i).encode())
        assert producer.flush(3) > 0

        os.kill(own_zookeeper.proc.pid, signal.SIGCONT)
        assert producer.flush(60) == 0
        deadline = time.monotonic() + 30
        while True:
            try:
                _create(admin, "after", 2)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        consumer = Consumer({"bootstrap.servers": cluster.broker(1).bootstrap,
                             "group.id": "unused", "enable.auto.commit": False})
        try:
            ends = [consumer.get_watermark_offsets(TopicPartition("steady", p), timeout=10)[1]
                    for p in range(4)]
        finally:
            consumer.close()
        assert sum(ends) == 400
        assert "Traceback" not in cluster.log_text(1) + cluster.log_text(2)
    finally:
        cluster.close()

