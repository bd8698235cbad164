"""Replication throttles on a real 3-broker cluster, set as Kafka's reassignment tool sets
them, through the Kafka protocol (confluent-kafka's AdminClient.incremental_alter_configs
on BROKER and TOPIC resources): a follower catching up after a restart does so at the
throttle's rate, at full speed once the throttle is removed (without a restart); a
replica added by a reassignment copies at the throttle's rate; a follower in the ISR is
never held back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from .cluster_support import Cluster, wait_until
from .helpers import RawClient, code, nested, req
from .replica_check import log_end_offset
from .replication_support import create_replicated_topic, isr, wait_full_isr

pytestmark = pytest.mark.slow

MB = 1 << 20
THROTTLE = 2 * MB  # bytes/s, leader and follower
BACKLOG = 40 * MB
VALUE = 10_000
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def alter(cluster: Cluster, via: int, kind: ConfigResource.Type, name: str,
          configs: dict[str, str | None]) -> None:
    """SET each config with a value, DELETE each with None, through broker ``via``. A
    client of its own each time: one that saw a broker leave the metadata waits for it
    by id until its metadata lists it again, which an idle admin client does not ask for."""
    admin = AdminClient({"bootstrap.servers": cluster.broker(via).bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None
        else ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE)
        for k, v in configs.items()
    ]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def set_rates(cluster: Cluster, brokers: list[int], rate: int | None) -> None:
    value = None if rate is None else str(rate)
    for b in brokers:
        alter(cluster, b, ConfigResource.Type.BROKER, str(b),
              {LEADER_RATE: value, FOLLOWER_RATE: value})


def produce(bootstrap: str, topic: str, total: int) -> float:
    """acks=all, incompressible values; the seconds it took."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
        "batch.size": 1_000_000, "compression.type": "none", "enable.idempotence": False,
    })
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    payload = os.urandom(VALUE)
    started = time.monotonic()
    for i in range(total // VALUE):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    elapsed = time.monotonic() - started
    assert not failures, failures[:3]
    return elapsed


def log_bytes(partition_dir: Path) -> int:
    """How far the replica's log reaches (its log end), in bytes of its segment files:
    what a throttle counts."""
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def throttled_rate(directory: Path, target: int) -> float:
    """The replica's catch-up rate (bytes/s) from when it holds more than a new quota
    window's first burst (a window's worth and a fetch) to when it holds 60% of
    ``target``."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        size = log_bytes(directory) if directory.exists() else 0
        samples.append((time.monotonic(), size))
        if size >= target * 0.6:
            break
        time.sleep(0.1)
    measured = [(t, b) for t, b in samples if b >= 6 * MB]
    assert len(measured) >= 2, samples[-5:]
    (t0, b0), (t1, b1) = measured[0], measured[-1]
    return (b1 - b0) / (t1 - t0)


def test_a_returning_follower_catches_up_at_the_throttled_rate(cluster_factory) -> None:
    cluster: Cluster = cluster_factory(3)
    topic = "throttled"
    create_replicated_topic(cluster, topic, 1)
    leader = int(cluster.partition_state(topic, 0)["leader"])
    controller = cluster.controller_id()
    follower = next(b for b in cluster.ids if b not in (leader, controller))
    other = next(b for b in cluster.ids if b not in (leader, follower))
    # The rates first, on every broker (the follower's own is set while it is up).
    set_rates(cluster, cluster.ids, THROTTLE)

    cluster.stop(follower)
    wait_until(lambda: follower not in isr(cluster, topic, 0), "the follower out of the ISR")
    produce(cluster.broker(leader).bootstrap, topic, BACKLOG)
    target = log_bytes(cluster.partition_dir(leader, topic, 0))
    assert target >= BACKLOG
    # The reassignment tool's lists: the replicas that may lead, the one moving in.
    alter(cluster, leader, ConfigResource.Type.TOPIC, topic, {
        LEADER_REPLICAS: f"0:{leader},0:{other}",
        FOLLOWER_REPLICAS: f"0:{follower}",
    })

    cluster.broker(follower).start()
    directory = cluster.partition_dir(follower, topic, 0)
    rate = throttled_rate(directory, target)
    assert 0.7 * THROTTLE <= rate <= 1.3 * THROTTLE, f"{rate / MB:.2f} MB/s throttled"

    # The lists removed (as --verify does once the move is done), on the running brokers:
    # the rest comes at full speed, the time to take the change included.
    removed = time.monotonic()
    rest = target - log_bytes(directory)
    alter(cluster, leader, ConfigResource.Type.TOPIC, topic,
          {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None})
    wait_until(lambda: log_bytes(directory) >= target, "the follower caught up", 60, 0.05)
    fast = rest / (time.monotonic() - removed)
    assert fast >= 2.5 * THROTTLE, f"{fast / MB:.2f} MB/s unthrottled, {rest / MB:.1f} MB"
    set_rates(cluster, cluster.ids, None)
    wait_full_isr(cluster, topic, 1)
    assert log_end_offset(directory) == log_end_offset(cluster.partition_dir(leader, topic, 0))


def test_a_follower_in_the_isr_is_never_throttled(cluster_factory) -> None:
    cluster: Cluster = cluster_factory(3)
    topic = "in-sync"
    create_replicated_topic(cluster, topic, 1)
    leader = int(cluster.partition_state(topic, 0)["leader"])
    slow = MB // 2
    set_rates(cluster, cluster.ids, slow)
    alter(cluster, leader, ConfigResource.Type.TOPIC, topic,
          {LEADER_REPLICAS: "*", FOLLOWER_REPLICAS: "*"})
    total = 12 * MB
    # Held to the throttle, replication (and so acks=all) would take over 20 s.
    elapsed = produce(cluster.broker(leader).bootstrap, topic, total)
    assert elapsed < total / slow / 3, f"{elapsed:.1f} s for {total // MB} MB"
    assert sorted(isr(cluster, topic, 0)) == cluster.ids


def test_a_replica_added_by_a_reassignment_copies_at_the_throttled_rate(cluster_factory) -> None:
    """What the reassignment tool does with --throttle: the rates on the brokers, the
    existing replicas in the leader list, the new one in the follower list; then
    AlterPartitionReassignments adds the replica, which copies the log under the throttle
    and joins the ISR, and the reassignment completes."""
    cluster: Cluster = cluster_factory(3)
    topic = "moving"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])
    futures[topic].result(timeout=60)
    cluster.wait_topic(topic, 1)
    wait_until(lambda: sorted(isr(cluster, topic, 0)) == [1, 2], "the ISR full")
    produce(cluster.bootstrap, topic, BACKLOG * 3 // 4)
    leader = int(cluster.partition_state(topic, 0)["leader"])
    target = log_bytes(cluster.partition_dir(leader, topic, 0))
    set_rates(cluster, cluster.ids, THROTTLE)
    alter(cluster, 1, ConfigResource.Type.TOPIC, topic, {
        LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3",
    })

    with RawClient(cluster.broker(cluster.controller_id()).bootstrap) as raw:
        response = raw.request(req(45, 0, topics=(nested(
            45, 0, "ReassignableTopic", name=topic,
            partitions=(nested(45, 0, "ReassignablePartition", partition_index=0,
                               replicas=(1, 2, 3)),),
        ),)))
    assert [code(p.error_code) for t in response.responses for p in t.partitions] == [0]
    rate = throttled_rate(cluster.partition_dir(3, topic, 0), target)
    assert 0.7 * THROTTLE <= rate <= 1.3 * THROTTLE, f"{rate / MB:.2f} MB/s throttled"
    wait_until(lambda: cluster.assignment(topic) == {0: [1, 2, 3]}
               and sorted(isr(cluster, topic, 0)) == [1, 2, 3],
               "the reassignment done", timeout=60)
