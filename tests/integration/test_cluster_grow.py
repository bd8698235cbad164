"""Growing and shrinking a cluster under load, as an operator would.

Three brokers serve a replicated topic to an idempotent acks=all producer and a consumer
group. Two more brokers join; `chronik cluster rebalance` spreads the replicas and leaders
over the five; `chronik cluster decommission 1` moves everything off broker 1, which is
then stopped. Throughout: no acknowledged record lost or duplicated, each key's records in
order, the group's committed offsets never going back, and at the end every replica of
every partition byte-identical.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from .cli_support import chronik
from .cluster_support import Cluster, wait_until
from .replica_check import assert_acknowledged_present
from .replication_support import (
    BackgroundGroup,
    BackgroundProducer,
    committed,
    converged,
    create_replicated_topic,
    wait_full_isr,
)

pytestmark = pytest.mark.slow

PARTITIONS = 6


def replica_counts(cluster: Cluster, topics: list[str]) -> Counter[int]:
    counts: Counter[int] = Counter()
    for topic in topics:
        for replicas in cluster.assignment(topic).values():
            counts.update(replicas)
    return counts


def run(cluster: Cluster, *args: str, via: int, timeout: float = 240) -> str:
    result = chronik(*args, bootstrap=cluster.broker(via).bootstrap, timeout=timeout)
    assert result.returncode == 0, f"chronik {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def test_grow_rebalance_and_decommission_under_load(zookeeper, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 5,
                      {"offsets.topic.replication.factor": "3"})
    producer: BackgroundProducer | None = None
    group: BackgroundGroup | None = None
    try:
        cluster.start(1, 2, 3)
        topic = "orders"
        create_replicated_topic(cluster, topic, PARTITIONS, rf=3, **{"min.insync.replicas": "2"})
        producer = BackgroundProducer(cluster.bootstrap, topic, max_rate=400).start()
        group = BackgroundGroup(cluster.bootstrap, topic, "projection").start()
        wait_until(lambda: group.count > 200, "the group reading")

        cluster.start(4, 5)
        assert replica_counts(cluster, [topic])[4] == 0
        marks: list[dict[int, int]] = [committed(cluster.bootstrap, "projection", topic,
                                                 PARTITIONS)]
        before = cluster.assignment(topic)
        plan = run(cluster, "cluster", "rebalance", "--dry-run", via=2)
        assert "bytes" in plan
        time.sleep(1)
        assert cluster.assignment(topic) == before, "a dry run moved something"
        run(cluster, "cluster", "rebalance", via=2)
        wait_full_isr(cluster, topic, PARTITIONS, timeout=120)
        counts = replica_counts(cluster, [topic])
        # 18 replicas over 5 brokers: 3 or 4 each.
        assert sorted(counts) == [1, 2, 3, 4, 5] and max(counts.values()) - min(
            counts.values()) <= 1, counts
        leaders = Counter(cluster.partition_state(topic, p)["leader"] for p in range(PARTITIONS))
        assert max(leaders.values()) <= 2, leaders
        marks.append(committed(cluster.bootstrap, "projection", topic, PARTITIONS))

        run(cluster, "cluster", "decommission", "1", via=2)
        assert replica_counts(cluster, [topic])[1] == 0
        wait_full_isr(cluster, topic, PARTITIONS, timeout=120)
        wait_until(lambda: not any(cluster.partition_dir(1, topic, p).exists()
                                   for p in range(PARTITIONS)),
                   "broker 1's copies deleted")
        assert cluster.stop(1) == 0
        time.sleep(3)  # the load goes on without broker 1
        marks.append(committed(cluster.broker(2).bootstrap, "projection", topic, PARTITIONS))

        acked = producer.stop()
        producer = None
        final = group.stop_and_commit(PARTITIONS)
        group = None
        marks.append(committed(cluster.broker(2).bootstrap, "projection", topic, PARTITIONS))
        for earlier, later in zip(marks, marks[1:], strict=False):
            for p, offset in earlier.items():
                assert later.get(p, -1) >= offset, f"partition {p}: {earlier} then {later}"
        assert marks[-1] == final
        assert len(acked) > 1000
        replicas = converged(cluster, topic, PARTITIONS)
        assert_acknowledged_present(acked, replicas)
        for p, per_broker in replicas.items():
            assert 1 not in per_broker, f"partition {p} still has a replica on broker 1"
    finally:
        if producer is not None:
            producer.abandon()
        if group is not None:
            group.abandon()
        cluster.close()
