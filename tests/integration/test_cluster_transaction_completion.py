"""A transaction whose completion cannot be written for a long time is completed once it
can be, as Kafka's coordinator retries for as long as it coordinates the id: here the
completion fails because __transaction_state has too few in-sync replicas
(transaction.state.log.min.isr) after its markers were written, for longer than any fixed
number of attempts would cover; once the follower is back the transaction completes and
its transactional id works again."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from .cluster_support import Cluster, wait_until

pytestmark = pytest.mark.slow

TXN_ID = "wedge"
TOPIC = "wedge-data"
CONFIG = {
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "2",
    "transaction.state.log.min.isr": "2",
}
DATA_BROKER = 3  # holds the only replica of TOPIC, never of __transaction_state
# How long the completion keeps failing: beyond the 50 attempts 0.2 s apart that the
# coordinator used to make before leaving the transaction in PrepareCommit.
FAILING_SECONDS = 15.0


def _committed_values(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wedge-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[bytes] = []
        quiet = time.monotonic()
        deadline = time.monotonic() + 30
        while time.monotonic() - quiet < 2.0 and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
                quiet = time.monotonic()
        return out
    finally:
        consumer.close()


def test_completion_written_once_the_transaction_log_takes_writes_again(zookeeper, tmp_path):
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3, CONFIG)
    try:
        # __transaction_state is made while brokers 1 and 2 are the cluster, so they hold
        # its replicas; broker 3 then takes the data.
        cluster.start(1, 2)
        bootstrap = f"{cluster.broker(1).bootstrap},{cluster.broker(2).bootstrap}"
        first = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID})
        first.init_transactions(30)
        cluster.start(DATA_BROKER)
        admin = cluster.admin(1)
        admin.create_topics([NewTopic(TOPIC, num_partitions=1,
                                     replica_assignment=[[DATA_BROKER]])],
                            request_timeout=30)[TOPIC].result()
        cluster.wait_topic(TOPIC, 1)
        state = cluster.partition_state("__transaction_state", 0)
        assert sorted(state["isr"]) == [1, 2], state
        leader = state["leader"]
        follower = 3 - leader

        first.begin_transaction()
        for i in range(10):
            first.produce(TOPIC, value=f"first-{i}".encode())
        assert first.flush(20) == 0

        # The markers wait for the data broker: PrepareCommit is written, Complete not yet.
        data = cluster.broker(DATA_BROKER).proc
        os.kill(data.pid, signal.SIGSTOP)
        committing = threading.Thread(target=first.commit_transaction, args=(30,), daemon=True)
        try:
            committing.start()
            committing.join(30)
            assert not committing.is_alive()
            # Then __transaction_state loses its follower: the ISR is below min.isr.
            assert cluster.stop(follower) == 0
            wait_until(lambda: cluster.partition_state("__transaction_state", 0)["isr"]
                       == [leader], "the follower out of the transaction log's ISR")
        finally:
            os.kill(data.pid, signal.SIGCONT)
        wait_until(lambda: "completion not stored" in cluster.log_text(leader),
                   "the coordinator failing to write the completion", 60)
        time.sleep(FAILING_SECONDS)

        cluster.start(follower)
        wait_until(lambda: sorted(cluster.partition_state("__transaction_state", 0)["isr"])
                   == [1, 2], "the follower back in the transaction log's ISR")
        # The id is usable again: a new producer of it initialises (which waits for the
        # open transaction to complete) and commits.
        second = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TXN_ID})
        second.init_transactions(60)
        second.begin_transaction()
        for i in range(5):
            second.produce(TOPIC, value=f"second-{i}".encode())
        second.commit_transaction(30)

        values = _committed_values(cluster.bootstrap)
        assert values == [f"first-{i}".encode() for i in range(10)] + [
            f"second-{i}".encode() for i in range(5)
        ]
        for i in cluster.ids:
            assert "Traceback" not in cluster.log_text(i)
    finally:
        cluster.close()
