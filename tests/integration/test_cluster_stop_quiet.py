"""SIGTERM of a cluster broker closes its ZooKeeper session while its own watches are
still firing (its registration going is a change of /brokers/ids it watches itself, and
so is each other broker's): the brokers stop and start again, and no log says more than
a line about it, never a traceback."""

from __future__ import annotations

import gc

import pytest
from confluent_kafka.admin import NewTopic

from .cluster_support import Cluster, wait_until

pytestmark = pytest.mark.slow

ROUNDS = 8


def _start_all(cluster: Cluster) -> None:
    """Started and registered; no client talks to them, so what they log at their stop
    is about themselves."""
    for i in cluster.ids:
        cluster.broker(i).start(wait=False)
    for i in cluster.ids:
        cluster.broker(i).wait_ready()
    wait_until(lambda: cluster.live_ids() == set(cluster.ids), "every broker registered")


def _stop_all(cluster: Cluster) -> None:
    """All at once."""
    for i in cluster.ids:
        cluster.broker(i).proc.terminate()
    for i in cluster.ids:
        assert cluster.broker(i).proc.wait(30) == 0


def test_sigterm_of_cluster_brokers_logs_no_traceback(zookeeper, tmp_path):
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3)
    try:
        cluster.start()
        admin = cluster.admin(1)
        # One replica each: what is under test is the brokers' ZooKeeper sessions, not
        # their replica fetchers, which see their leaders go as they stop themselves.
        topics = [NewTopic(f"quiet-{n}", 6, 1) for n in range(3)]
        for future in admin.create_topics(topics, request_timeout=30).values():
            future.result()
        for topic in topics:
            cluster.wait_topic(topic.topic, 6)
        del admin
        cluster._admins.clear()
        gc.collect()
        # Each with the others running, then all of them right after they start, while
        # each still reads the cluster and sees the others' registrations go as its own
        # session closes.
        for i in cluster.ids:
            assert cluster.stop(i) == 0
            cluster.broker(i).start()
        for _ in range(ROUNDS):
            _stop_all(cluster)
            _start_all(cluster)
        _stop_all(cluster)
        for i in cluster.ids:
            text = cluster.log_text(i)
            assert "Traceback" not in text, f"broker {i}:\n{text[-6000:]}"
            assert text.count("chronik broker stopped") == ROUNDS + 2
    finally:
        cluster.close()
