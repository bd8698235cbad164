"""The ISR kept in ZooKeeper under a slow leader: a member that ZooKeeper counts in the
ISR holds everything acknowledged.

The leader's ZooKeeper traffic goes through the harness's delaying proxy, so each of its
ISR writes lands seconds after it was decided and the news of the controller's writes
reaches it seconds late: the windows that a loaded ZooKeeper or a slow network open.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import NewTopic

from integration.replica_check import assert_acknowledged_present
from integration.replication_support import BackgroundProducer, converged

from .cluster import ChaosCluster, wait_until

TOPIC = "events"
DELAY = 2.0
CONFIG = {
    "zookeeper.session.timeout.ms": "12000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
}


def _topic(cluster: ChaosCluster, min_isr: int) -> None:
    futures = cluster.admin().create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]],
                  config={"min.insync.replicas": str(min_isr)})],
        operation_timeout=30,
    )
    futures[TOPIC].result(60)
    cluster.wait_full_isr(TOPIC, 1)


def _isr(cluster: ChaosCluster) -> list[int]:
    return list(cluster.partition_state(TOPIC, 0)["isr"])


def test_a_member_joining_the_isr_holds_what_is_acknowledged_meanwhile(chaos_cluster):
    """The leader used to start the ISR expansion's ZooKeeper write and go on advancing
    the high watermark over the old ISR until the write came back: the new member,
    already in ZooKeeper's ISR, could lack acknowledged records, and a failover to it
    lost them. Here the leader's write takes seconds to land and seconds more to come
    back; broker 3 is frozen as soon as ZooKeeper counts it in the ISR, and the two
    other brokers are killed a moment later: broker 3 leads, and must hold every
    acknowledged record."""
    cluster = chaos_cluster(config=CONFIG, zk_proxies=True)
    _topic(cluster, min_isr=2)
    producer = BackgroundProducer(cluster.bootstrap, TOPIC, keys=20, max_rate=500).start()
    try:
        wait_until(lambda: producer.acked_count > 200, "records acknowledged", 60)
        cluster.delay_zookeeper(1, DELAY)
        cluster.broker(3).pause()
        wait_until(lambda: _isr(cluster) == [1, 2], "broker 3 out of the ISR", 60)
        time.sleep(3 * DELAY)  # the leader has heard of its own shrink
        cluster.broker(3).resume()  # it catches up; the leader starts the expansion
        wait_until(lambda: 3 in _isr(cluster), "broker 3 back in ZooKeeper's ISR", 60, 0.02)
        cluster.broker(3).pause()
        # The leader hears of its write only now: records it acknowledges meanwhile are
        # not on broker 3, yet ZooKeeper counts broker 3 in the ISR.
        time.sleep(DELAY * 0.75)
        cluster.broker(1).kill()
        cluster.broker(2).kill()
        cluster.broker(3).resume()
        wait_until(lambda: cluster.leader(TOPIC, 0) == 3, "broker 3 elected", 60)
        cluster.delay_zookeeper(1, 0)
        cluster.broker(1).start()
        cluster.broker(2).start()
        cluster.wait_full_isr(TOPIC, 1, 120)
        time.sleep(2)
    finally:
        acked = producer.finish()
    assert_acknowledged_present(acked, converged(cluster, TOPIC, 1))
