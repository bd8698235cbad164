"""SIGTERM of a cluster broker closes its ZooKeeper session while its own watches are
still firing (its registration going is a change of /brokers/ids it watches itself):
the brokers stop and start again, and no log says more than a line about it, never a
traceback."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewTopic

from .cluster_support import Cluster

pytestmark = pytest.mark.slow

ROUNDS = 8


def _stop_all(cluster: Cluster) -> None:
    for i in cluster.ids:
        cluster.broker(i).proc.terminate()
    for i in cluster.ids:
        assert cluster.broker(i).proc.wait(30) == 0


def test_sigterm_of_cluster_brokers_logs_no_traceback(zookeeper, tmp_path):
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3)
    try:
        cluster.start()
        admin = cluster.admin(1)
        topics = [NewTopic(f"quiet-{n}", 4, 3) for n in range(3)]
        for future in admin.create_topics(topics, request_timeout=30).values():
            future.result()
        for topic in topics:
            cluster.wait_topic(topic.topic, 4)
        # One at a time, then all at once right after they start, while each still reads
        # the cluster and sees the others' registrations go as its own session closes.
        for i in cluster.ids:
            assert cluster.stop(i) == 0
            cluster.start(i)
        for _ in range(ROUNDS):
            _stop_all(cluster)
            cluster.start()
        _stop_all(cluster)
        for i in cluster.ids:
            text = cluster.log_text(i)
            assert "Traceback" not in text, f"broker {i}:\n{text[-6000:]}"
            assert text.count("chronik broker stopped") == ROUNDS + 2
    finally:
        cluster.close()
