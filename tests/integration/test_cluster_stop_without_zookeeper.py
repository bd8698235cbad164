"""A cluster broker cut off from ZooKeeper still stops on SIGTERM, as Kafka's broker gives
up on its ZooKeeper client at close: it exits 0 within the stop timeout whether ZooKeeper
is paused (SIGSTOP: connections hang) or gone (killed: connections refused), and says so
without a traceback, even when ZooKeeper comes back after it has gone."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from conftest import start_zookeeper

from .cluster_support import Cluster, wait_until

pytestmark = pytest.mark.slow

# What an operator may wait for after SIGTERM: the connections' drain plus the bounded
# close of the ZooKeeper session, with room for a busy machine.
STOP_TIMEOUT = 30.0


@pytest.fixture
def own_zookeeper(tmp_path):
    """A ZooKeeper of this test's own: it is paused or killed, which the session's must not be."""
    zk = start_zookeeper(tmp_path / "zookeeper")
    try:
        yield zk
    finally:
        if zk.proc is not None and zk.proc.poll() is None:
            os.kill(zk.proc.pid, signal.SIGCONT)
        zk.stop()


def _lost_zookeeper(cluster: Cluster, i: int) -> bool:
    return "ZooKeeper connection lost" in cluster.log_text(i)


@pytest.mark.parametrize("fault", ["paused", "killed"])
def test_sigterm_stops_a_broker_that_cannot_reach_zookeeper(own_zookeeper, tmp_path, fault):
    cluster = Cluster(tmp_path / "cluster", own_zookeeper.connect, 2)
    try:
        cluster.start()
        admin = cluster.admin(1)
        admin.create_topics([NewTopic("kept", 2, 2)], request_timeout=20)["kept"].result()
        cluster.wait_topic("kept", 2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(50):
            producer.produce("kept", key=str(i).encode(), value=b"v")
        assert producer.flush(20) == 0

        zk = own_zookeeper.proc
        if fault == "paused":
            os.kill(zk.pid, signal.SIGSTOP)
        else:
            zk.kill()
            zk.wait()
        for i in cluster.ids:
            wait_until(lambda i=i: _lost_zookeeper(cluster, i),
                       f"broker {i} noticing ZooKeeper is away", 30)
        # Admin work queued meanwhile leaves calls waiting on the session's threads.
        admin.create_topics([NewTopic("while-away", 1, 1)], request_timeout=2)

        # One after the other, as an operator stopping the brokers would.
        codes: dict[int, int | None] = {}
        took: dict[int, float] = {}
        for i in cluster.ids:
            started = time.monotonic()
            cluster.broker(i).proc.send_signal(signal.SIGTERM)
            try:
                codes[i] = cluster.broker(i).proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                codes[i] = None
            took[i] = round(time.monotonic() - started, 1)
        if fault == "paused":
            # ZooKeeper back after the brokers went: nothing of theirs may run on by then.
            os.kill(zk.pid, signal.SIGCONT)
            time.sleep(2.0)
        assert codes == {i: 0 for i in cluster.ids}, (
            f"exit codes {codes} after {took} s\n"
            + "\n".join(cluster.log_text(i)[-3000:] for i in cluster.ids)
        )
        for i in cluster.ids:
            text = cluster.log_text(i)
            assert "chronik broker stopped" in text
            assert "Traceback" not in text, text[-4000:]
            assert "Event loop is closed" not in text, text[-4000:]
            # Losing ZooKeeper is said once, not once per attempt to reach it again.
            assert text.count("ZooKeeper connection lost") == 1, text[-4000:]
            assert "kazoo" not in text, text[-4000:]
    finally:
        cluster.close()
