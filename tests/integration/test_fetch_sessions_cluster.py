"""Followers fetch from their leaders in fetch sessions (KIP-227,
chronik.cluster.fetch_session_handler), and replication loses nothing through a leader
change and a follower's restart (its sessions gone: it starts over with full fetches)."""

from __future__ import annotations

import re
import time

import pytest

from .cluster_support import Cluster, wait_until
from .helpers import topic_name
from .replica_check import assert_acknowledged_present
from .replication_support import (
    REPLICATION_CONFIG,
    BackgroundProducer,
    converged,
    create_replicated_topic,
    leader,
    wait_full_isr,
)

PARTITIONS = 6


def opened(text: str, leader_id: int) -> int:
    """How many fetch sessions a follower's log says it opened with ``leader_id``."""
    return len(re.findall(rf"broker {leader_id} opened fetch session \d+", text))


def leaders(cluster: Cluster, topic: str) -> dict[int, int]:
    return {p: leader(cluster, topic, p) for p in range(PARTITIONS)}


def wait_acked(producer: BackgroundProducer, more: int) -> None:
    mark = producer.acked_count
    wait_until(lambda: producer.acked_since(mark) >= more, f"{more} more records acknowledged",
               90)


@pytest.mark.slow
def test_followers_keep_sessions_through_a_leader_change_and_a_restart(cluster_factory):
    cluster = cluster_factory(3, REPLICATION_CONFIG)
    topic = topic_name("fs")
    create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})
    producer = BackgroundProducer(cluster.bootstrap, topic, max_rate=300).start()
    try:
        wait_acked(producer, 300)
        led = leaders(cluster, topic)
        pairs = [(b, lead) for b in cluster.ids for lead in set(led.values()) if lead != b]
        for b, lead in pairs:
            wait_until(lambda b=b, lead=lead: opened(cluster.log_text(b), lead) >= 1,
                       f"broker {b} fetching from broker {lead} in a session")
        counts = {(b, lead): opened(cluster.log_text(b), lead) for b, lead in pairs}
        # Seconds of replication, hundreds of fetches, in the same sessions: none reopened.
        wait_acked(producer, 600)
        time.sleep(1.0)
        assert {(b, lead): opened(cluster.log_text(b), lead) for b, lead in pairs} == counts
        for b in cluster.ids:
            assert "could not serve fetch session" not in cluster.log_text(b)

        # A leader change: the new leader's followers fetch its partitions as before.
        old = led[0]
        assert cluster.stop(old) == 0
        wait_until(lambda: leader(cluster, topic, 0) not in (old, -1), "a new leader of p0")
        wait_acked(producer, 300)

        # The old leader comes back as a follower, with no session: full fetches first,
        # then sessions with each leader again.
        before = len(cluster.log_text(old))
        cluster.start(old)
        wait_full_isr(cluster, topic, PARTITIONS, timeout=90)
        now_led = set(leaders(cluster, topic).values()) - {old}
        for lead in now_led:
            wait_until(lambda lead=lead: opened(cluster.log_text(old)[before:], lead) >= 1,
                       f"restarted broker {old} fetching from broker {lead} in a session")
        wait_acked(producer, 300)
    finally:
        acked = producer.stop()
    assert len(acked) >= 1500
    replicas = converged(cluster, topic, PARTITIONS)
    assert_acknowledged_present(acked, replicas)
