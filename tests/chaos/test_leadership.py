"""Leadership under faults: a broker serves a partition as leader only once it has taken
leadership up, with its epoch, its followers and its high watermark; and a leadership
it cannot take up (its disk is full) is neither half taken nor acknowledged alone.

Each test is the scenario of a defect suspected in review, run against real brokers on
the harness's private network.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import NewTopic

from chronik.records.builder import Record, build_batch
from integration.rawclient import RawClient
from integration.replica_check import (
    assert_acknowledged_present,
    replica_batches,
    replica_dirs,
)
from integration.replication_support import BackgroundProducer, converged, produce_request

from .cluster import ChaosCluster, wait_until
from .nodes import fsync_fault_library

TOPIC = "events"


def _leader_other_than(cluster: ChaosCluster, gone: set[int]) -> int:
    def found() -> int | None:
        leader = cluster.leader(TOPIC, 0)
        return leader if leader >= 0 and leader not in gone else None

    return wait_until(found, f"a leader of {TOPIC}-0 other than {sorted(gone)}", 60)


def _probe(cluster: ChaosCluster, broker_id: int, seconds: float) -> list[int]:
    """acks=1 produces straight to one broker for ``seconds``: their error codes."""
    codes: list[int] = []
    deadline = time.monotonic() + seconds
    with RawClient(cluster.broker(broker_id).bootstrap) as client:
        while time.monotonic() < deadline:
            value = f"probe-{len(codes)}".encode()
            batch = build_batch([Record(int(time.time() * 1000), b"probe", value)])
            response = client.request(produce_request(TOPIC, 0, batch, acks=1))
            codes.append(int(response.responses[0].partition_responses[0].error_code))
            time.sleep(0.05)
    return codes


def _unstamped_batches(
    cluster: ChaosCluster, topic: str, partition: int, brokers: set[int] | None = None
) -> list[str]:
    """Batches of a replicated partition without a leader epoch, on the replicas of
    ``brokers`` (all when None)."""
    out = []
    for broker_id, directory in replica_dirs(cluster, topic, partition).items():
        if brokers is not None and broker_id not in brokers:
            continue
        for header, _ in replica_batches(directory):
            if header.partition_leader_epoch < 0:
                out.append(f"broker {broker_id}: batch at {header.base_offset}")
    return out


def test_failover_while_storing_a_large_topic_serves_only_after_leadership_is_taken_up(
    chaos_cluster,
):
    """Leadership for Produce used to be read off the ZooKeeper view while the replica
    manager took it up only after the reconcile pass had stored every new partition
    (seconds for a large topic). A leader elected in that window appended client batches
    with no leader epoch and answered OffsetForLeaderEpoch with an end that counted
    them, so a follower kept a tail of the old leader's records at the same offsets.

    Here broker 2 leads, broker 1 is frozen for a second (broker 3 gets records it does
    not), broker 2 is killed while every broker stores a new 3,000-partition topic, and
    broker 1, first in the assignment, is elected; later it is killed too and broker 3
    leads. Nothing acknowledged may be lost or doubled, the replicas must agree byte for
    byte, and every batch must carry a leader epoch."""
    cluster = chaos_cluster(config={
        "zookeeper.session.timeout.ms": "2000",
        "replica.lag.time.max.ms": "10000",
    })
    futures = cluster.admin().create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[2, 1, 3]],
                  config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )
    futures[TOPIC].result(60)
    cluster.wait_full_isr(TOPIC, 1)
    producer = BackgroundProducer(cluster.bootstrap, TOPIC, keys=20, max_rate=1000).start()
    try:
        wait_until(lambda: producer.acked_count > 300, "records acknowledged", 60)
        cluster.admin().create_topics([NewTopic("big", 3000, 3)], operation_timeout=0)
        time.sleep(0.5)
        cluster.broker(1).pause()
        time.sleep(1.0)
        cluster.broker(2).kill()
        cluster.broker(1).resume()
        wait_until(lambda: cluster.leader(TOPIC, 0) == 1, "broker 1 elected", 60)
        # Broker 1 leads while it is still storing "big"; clients write to it.
        _probe(cluster, 1, 3.0)
        cluster.broker(1).kill()
        # Read before a restart truncates anything: all broker 1 wrote as leader.
        assert _unstamped_batches(cluster, TOPIC, 0, {1}) == []
        wait_until(lambda: cluster.leader(TOPIC, 0) == 3, "broker 3 elected", 60)
        time.sleep(2)
        cluster.broker(2).start()
        cluster.broker(1).start()
        count = producer.acked_count
        wait_until(lambda: producer.acked_count > count + 300, "records acknowledged after", 120)
    except BaseException:
        producer.abandon()
        raise
    acked = producer.stop()
    cluster.wait_full_isr(TOPIC, 1, 120)
    replicas = converged(cluster, TOPIC, 1)
    assert_acknowledged_present(acked, replicas)
    assert _unstamped_batches(cluster, TOPIC, 0) == []


def test_a_leader_elected_on_a_full_disk_is_not_half_taken_up(chaos_cluster):
    """Becoming leader used to set the role and the epoch before writing the leader-epoch
    checkpoint; when that write failed (a full disk) the follower states were never
    built, and that half-done leadership stayed once space came back: the high watermark
    ignored the followers, acks=all was answered by the leader alone, and followers
    could not fetch. Here broker 1's disk is full when it is elected; space comes back;
    then broker 1 is killed and broker 3 leads: nothing acknowledged may be missing."""
    cluster = chaos_cluster(config={"zookeeper.session.timeout.ms": "4000"}, disk_mb=256)
    futures = cluster.admin().create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[2, 1, 3]],
                  config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )
    futures[TOPIC].result(60)
    cluster.wait_full_isr(TOPIC, 1)
    producer = BackgroundProducer(cluster.bootstrap, TOPIC, keys=20, max_rate=300).start()
    try:
        wait_until(lambda: producer.acked_count > 200, "records acknowledged", 60)
        cluster.broker(1).disk.fill()
        cluster.broker(2).kill()
        wait_until(lambda: cluster.leader(TOPIC, 0) == 1, "broker 1 elected", 60)
        time.sleep(3)
        cluster.broker(1).disk.free()
        count = producer.acked_count
        wait_until(lambda: producer.acked_count > count + 300, "records acknowledged", 60)
        cluster.broker(1).kill()
        wait_until(lambda: cluster.leader(TOPIC, 0) == 3, "broker 3 elected", 60)
        cluster.broker(2).start()
        cluster.broker(1).start()
        cluster.wait_full_isr(TOPIC, 1, 120)
        time.sleep(2)
    finally:
        acked = producer.finish()
    assert_acknowledged_present(acked, converged(cluster, TOPIC, 1))


def test_a_leader_whose_fsync_fails_hands_its_partition_on(chaos_cluster, tmp_path):
    """A failed fsync takes a partition offline on its broker (what is on disk is
    unknown) until a restart recovers it. Its leader used to keep the leadership, so the
    partition took no write at all until then; Kafka moves the leadership of a failed
    log directory's partitions. Here broker 1's disk starts failing every fsync while it
    leads: another in-sync replica must lead within seconds, acknowledgements go on,
    and nothing acknowledged is lost."""
    library = fsync_fault_library(tmp_path / "build")
    if library is None:
        pytest.skip("no C compiler to build the fsync fault library")
    cluster = chaos_cluster(config={"zookeeper.session.timeout.ms": "6000"})
    fault = tmp_path / "fsync-fails"
    broker = cluster.broker(1)
    broker.env.update(LD_PRELOAD=str(library), FSYNC_FAULT_FILE=str(fault))
    broker.terminate()
    broker.start()
    cluster.wait_settled()
    futures = cluster.admin().create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]],
                  config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )
    futures[TOPIC].result(60)
    cluster.wait_full_isr(TOPIC, 1)
    producer = BackgroundProducer(cluster.bootstrap, TOPIC, keys=20, max_rate=300).start()
    try:
        wait_until(lambda: producer.acked_count > 200, "records acknowledged", 60)
        fault.touch()
        wait_until(lambda: cluster.leader(TOPIC, 0) in (2, 3), "another leader", 30)
        count = producer.acked_count
        wait_until(lambda: producer.acked_count > count + 300, "records acknowledged", 60)
        assert "handing its leadership to another in-sync replica" in broker.log_text()
        fault.unlink()
        broker.terminate()
        broker.start()  # recovery brings the partition back
        cluster.wait_full_isr(TOPIC, 1, 120)
        time.sleep(2)
    finally:
        acked = producer.finish()
    assert_acknowledged_present(acked, converged(cluster, TOPIC, 1))
