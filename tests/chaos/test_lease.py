"""A leader cut off from ZooKeeper (clients and the other brokers still reach it) stops
acknowledging before ZooKeeper can give its partitions away: what it acknowledged,
even with acks=1, is still in the log after the failover."""

from __future__ import annotations

import datetime
import threading
import time

from confluent_kafka.admin import NewTopic

from chronik.cluster.replica_client import request_module
from chronik.protocol import errors
from chronik.protocol.compat import build
from chronik.records.builder import Record, build_batch
from integration.rawclient import RawClient
from integration.replica_check import Acked, assert_acknowledged_present
from integration.replication_support import converged, produce_request

from .cluster import ChaosCluster, wait_until

TOPIC = "events"


class Probe:
    """acks=1 produces of unique values straight to one broker, every 20 ms."""

    def __init__(self, cluster: ChaosCluster, broker_id: int) -> None:
        self.bootstrap = cluster.broker(broker_id).bootstrap
        self.acked: list[Acked] = []
        self.refused: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def _run(self) -> None:
        sent = 0
        with RawClient(self.bootstrap, timeout=30) as raw:
            while not self._stop.is_set():
                value = f"probe-{sent:06d}".encode()
                sent += 1
                batch = build_batch([Record(int(time.time() * 1000), b"probe", value)])
                answer = raw.request(produce_request(TOPIC, 0, batch, acks=1))
                part = answer.responses[0].partition_responses[0]
                code = int(part.error_code)
                if code == errors.NONE:
                    self.acked.append(Acked(0, int(part.base_offset), b"probe", value))
                else:
                    self.refused[code] = self.refused.get(code, 0) + 1
                time.sleep(0.02)

    def stop(self) -> list[Acked]:
        self._stop.set()
        self._thread.join(60)
        return self.acked


def _fetch(offset: int) -> object:
    """A consumer's Fetch (v11) of partition 0 from ``offset``."""
    module = request_module(1, 11)
    return build(
        module.FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(build(module.FetchTopic, topic=TOPIC, partitions=(build(
            module.FetchPartition, partition=0, current_leader_epoch=-1,
            fetch_offset=offset, log_start_offset=-1, partition_max_bytes=1 << 20,
        ),)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_a_leader_cut_off_from_zookeeper_acknowledges_nothing_it_then_loses(chaos_cluster):
    """Without a lease, a leader that could not reach ZooKeeper went on acknowledging
    acks=1 writes after its session had expired and another broker had been elected;
    once it heard of that it truncated them away. With the lease it refuses them
    (NOT_LEADER_OR_FOLLOWER) from a third of the session timeout after it lost
    ZooKeeper, before ZooKeeper may expire its session."""
    cluster = chaos_cluster(config={"zookeeper.session.timeout.ms": "6000"})
    futures = cluster.admin().create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])], operation_timeout=30
    )
    futures[TOPIC].result(60)
    cluster.wait_full_isr(TOPIC, 1)
    probe = Probe(cluster, 1).start()
    try:
        wait_until(lambda: len(probe.acked) > 50, "probes acknowledged", 30)
        cluster.net.cut("b1", "zk")  # if it is the controller too, another takes over
        wait_until(lambda: cluster.leader(TOPIC, 0) not in (1, -1), "another leader", 60)
        time.sleep(3)
        # A consumer asking the deposed leader for what lies past its end (the new
        # leader has written on) is sent to look for the leader, not told it is out of
        # range: that would make it reset to earliest and commit what it re-read.
        with RawClient(cluster.broker(1).bootstrap) as raw:
            answer = raw.request(_fetch(1_000_000))
        assert int(answer.responses[0].partitions[0].error_code) == (
            errors.NOT_LEADER_OR_FOLLOWER
        )
        cluster.net.heal()
        wait_until(lambda: probe.refused, "probes refused", 30)
    finally:
        acked = probe.stop()
    cluster.wait_full_isr(TOPIC, 1, 120)
    assert errors.NOT_LEADER_OR_FOLLOWER in probe.refused
    assert_acknowledged_present(acked, converged(cluster, TOPIC, 1))
