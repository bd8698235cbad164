"""Controlled shutdown (Kafka's, ZooKeeper mode) on three brokers: a broker stopped with
SIGTERM first asks the controller to hand the leadership of its partitions to other
in-sync replicas, so an idempotent acks=all producer and a consumer group carry on
without an error while brokers restart one after the other; the ControlledShutdown API
on the wire; a controlled shutdown that cannot hand everything on still ends in a stop.

What each replica holds is read from the brokers' data dirs (replica_check)."""

from __future__ import annotations

import re
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronik.protocol import compat, legacy

from .cluster_support import Cluster, wait_until
from .helpers import code, topic_name
from .rawclient import RawClient
from .replica_check import assert_acknowledged_present
from .replication_support import (
    REPLICATION_CONFIG,
    BackgroundGroup,
    BackgroundProducer,
    converged,
    create_replicated_topic,
    isr,
    leader,
    wait_full_isr,
)

PARTITIONS = 6
NOT_CONTROLLER = 41
BROKER_NOT_AVAILABLE = 8
STALE_BROKER_EPOCH = 77
CLUSTER_AUTHORIZATION_FAILED = 31
CONFIG = {**REPLICATION_CONFIG, "controlled.shutdown.retry.backoff.ms": "500"}


def led_by(cluster: Cluster, topic: str, broker: int) -> set[int]:
    return {p for p in range(PARTITIONS) if leader(cluster, topic, p) == broker}


def broker_epoch(cluster: Cluster, broker: int) -> int:
    """Kafka's broker epoch: the czxid of the broker's registration."""
    _, stat = cluster.zk.get(f"/brokers/ids/{broker}")
    return int(stat.czxid)


def controlled_shutdown(bootstrap: str, version: int, broker_id: int, epoch: int = -1):
    """A ControlledShutdown request on a raw connection: (error code, remaining)."""
    fields = {"broker_id": broker_id} | ({"broker_epoch": epoch} if version >= 2 else {})
    request = compat.build(legacy.REQUESTS[7, version], **fields)
    with RawClient(bootstrap) as raw:
        if version == 0:
            # Request header v0: api key, version, correlation id, no client id.
            payload = struct.pack(">hhi", 7, 0, 5) + compat.encode(request)
            raw.send_bytes(struct.pack(">i", len(payload)) + payload)
            frame = raw.read_frame()
            assert frame is not None and struct.unpack_from(">i", frame)[0] == 5
            cls = legacy.RESPONSES[7, 0].ControlledShutdownResponse
            response = compat.decode(cls, frame, 4)[0]
        else:
            response = raw.request(request)
    return code(response.error_code), [
        (p.topic_name, int(p.partition_index)) for p in response.remaining_partitions
    ]


def took_back(log: str, broker: int) -> list[str]:
    """The leaders' ISR lines ("ISR [1, 3] -> [1, 3, 2] for ...") that add ``broker``."""
    out = []
    for match in re.finditer(r"ISR \[([\d, ]*)\] -> \[([\d, ]*)\]", log):
        old, new = ({int(b) for b in g.split(",") if b.strip()} for g in match.groups())
        if broker in new - old:
            out.append(match.group(0))
    return out


class Timeline:
    """Polls ZooKeeper while a broker stops: when every partition it led had another
    leader, and when its registration went."""

    def __init__(self, cluster: Cluster, topic: str, broker: int, led: set[int]) -> None:
        self.cluster, self.topic, self.broker, self.led = cluster, topic, broker, led
        self.moved_at: float | None = None
        self.deregistered_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        zk = self.cluster.zk
        while not self._stop.is_set() and self.deregistered_at is None:
            # Each observation is timed when it is made: a loaded machine can take a
            # while over one pass, and the leaders are read before the registration.
            if self.moved_at is None and all(
                leader(self.cluster, self.topic, p) != self.broker for p in self.led
            ):
                self.moved_at = time.monotonic()
            if zk.exists(f"/brokers/ids/{self.broker}") is None:
                self.deregistered_at = time.monotonic()
            time.sleep(0.01)


def test_a_leader_stopped_hands_its_partitions_on_first_and_the_producer_sees_nothing(
    cluster_factory,
):
    cluster = cluster_factory(config=CONFIG)
    topic = topic_name("cs")
    create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})
    producer = BackgroundProducer(cluster.bootstrap, topic, max_rate=1000).start()
    try:
        wait_until(lambda: producer.acked_count > 300, "the producer under way")
        victim = max(cluster.ids, key=lambda i: len(led_by(cluster, topic, i)))
        led = led_by(cluster, topic, victim)
        assert led
        before = {p: cluster.partition_state(topic, p) for p in range(PARTITIONS)}
        controller = cluster.controller_id()
        acked = producer.acked_count
        with Timeline(cluster, topic, victim, led) as timeline:
            assert cluster.stop(victim) == 0, cluster.log_text(victim)[-3000:]
        # Every partition it led had a new leader while it was still registered.
        assert timeline.moved_at is not None and timeline.deregistered_at is not None
        assert timeline.moved_at < timeline.deregistered_at
        for p in range(PARTITIONS):
            state = cluster.partition_state(topic, p)
            assert victim not in state["isr"], (p, state)
            if p in led:
                assert state["leader"] != victim
                assert state["leader_epoch"] == before[p]["leader_epoch"] + 1
            else:
                assert state["leader"] == before[p]["leader"]
        log = cluster.log_text(victim)
        assert "controlled shutdown succeeded" in log
        assert log.index("controlled shutdown succeeded") < log.index("chronik broker stopped")
        assert f"controlled shutdown of broker {victim}: leadership of {len(led)} partitions" \
            in cluster.log_text(controller)
        wait_until(lambda: producer.acked_since(acked, led) >= 200,
                   "acks from the new leaders")
        cluster.start(victim)
        wait_full_isr(cluster, topic, PARTITIONS)
        wait_until(lambda: producer.acked_count > acked + 600, "the producer going on")
    except BaseException:
        producer.abandon()
        raise
    acked_records = producer.stop()
    assert not producer.failed, f"delivery failures: {producer.failed[:5]}"
    assert len(acked_records) == producer.sent
    assert_acknowledged_present(acked_records, converged(cluster, topic, PARTITIONS))


def test_the_controlled_shutdown_api_on_the_wire(cluster_factory):
    cluster = cluster_factory(config=CONFIG)
    topic = topic_name("api")
    create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})
    controller = cluster.controller_id()
    other = next(i for i in cluster.ids if i != controller)
    epoch = broker_epoch(cluster, other)
    at_controller = cluster.broker(controller).bootstrap

    assert controlled_shutdown(cluster.broker(other).bootstrap, 3, other, epoch) == (
        NOT_CONTROLLER, [])
    assert controlled_shutdown(at_controller, 2, other, epoch - 1) == (STALE_BROKER_EPOCH, [])
    assert controlled_shutdown(at_controller, 1, 99) == (BROKER_NOT_AVAILABLE, [])
    assert controlled_shutdown(at_controller, 0, 99) == (BROKER_NOT_AVAILABLE, [])
    # Nothing was handed on by the refused requests.
    assert all(sorted(isr(cluster, topic, p)) == [1, 2, 3] for p in range(PARTITIONS))

    # Accepted (v3): `other` leads nothing with another replica and is in no ISR; it was
    # not told, so its fetchers keep fetching, and no leader takes it back meanwhile.
    led = led_by(cluster, topic, other)
    assert controlled_shutdown(at_controller, 3, other, epoch) == (0, [])
    for p in range(PARTITIONS):
        state = cluster.partition_state(topic, p)
        assert state["leader"] != other and other not in state["isr"], (p, state)
    took = {p: cluster.partition_state(topic, p)["leader"] for p in led}
    marks = {i: len(cluster.log_text(i)) for i in cluster.ids}
    time.sleep(4)  # many fetches of its own, all answered
    for p in range(PARTITIONS):
        assert other not in isr(cluster, topic, p), f"{topic}-{p} took broker {other} back"
    for i in cluster.ids:
        assert not took_back(cluster.log_text(i)[marks[i]:], other), cluster.log_text(i)
    # Its next registration ends its shutdown: restarted, it rejoins every ISR.
    assert cluster.stop(other) == 0
    cluster.start(other)
    wait_full_isr(cluster, topic, PARTITIONS)
    assert all(leader(cluster, topic, p) == took[p] for p in led)


def test_a_controlled_shutdown_that_cannot_hand_on_still_stops(cluster_factory):
    cluster = cluster_factory(config={**CONFIG, "controlled.shutdown.max.retries": "3"})
    topic = topic_name("sole")
    victim, partner = 2, 3
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[victim, partner]])],
        request_timeout=30,
    )[topic].result(60)
    cluster.wait_topic(topic, 1)
    wait_until(lambda: sorted(isr(cluster, topic, 0)) == [victim, partner], "a full ISR")
    # The partner stops first (itself handing nothing on: it only follows), leaving the
    # victim the partition's only in-sync replica.
    assert cluster.stop(partner) == 0
    assert isr(cluster, topic, 0) == [victim]
    started = time.monotonic()
    assert cluster.stop(victim) == 0, cluster.log_text(victim)[-3000:]
    took = time.monotonic() - started
    log = cluster.log_text(victim)
    assert "controlled shutdown: attempt 1 of 3" in log
    assert "controlled shutdown: attempt 2 of 3" in log
    assert "controlled shutdown failed" in log and f"{topic}-0" in log
    assert took >= 2 * 0.5, took  # it waited the backoff between the attempts
    # As before controlled shutdown: offline, its ISR kept for the broker's return.
    wait_until(lambda: cluster.partition_state(topic, 0)["leader"] == -1, "offline")
    assert cluster.partition_state(topic, 0)["isr"] == [victim]
    cluster.start(victim, partner)
    wait_until(lambda: sorted(isr(cluster, topic, 0)) == [victim, partner], "back")


def test_without_cluster_action_it_is_refused(broker_factory):
    broker = broker_factory({"authorizer.class.name": "chronik", "super.users": "User:admin"})
    assert controlled_shutdown(broker.bootstrap, 3, 1, -1) == (CLUSTER_AUTHORIZATION_FAILED, [])


def test_a_single_node_is_its_own_controller(broker):
    assert controlled_shutdown(broker.bootstrap, 1, 1) == (0, [])
    assert controlled_shutdown(broker.bootstrap, 3, 7, 3) == (BROKER_NOT_AVAILABLE, [])


class CommitWatch:
    """Polls the group's committed offsets (OffsetFetch, through whichever broker
    coordinates it) and records any that went back."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self.tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        self.highest: dict[int, int] = {}
        self.backwards: list[tuple[int, int, int]] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CommitWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                got = self.consumer.committed(self.tps, timeout=5)
            except Exception:  # noqa: BLE001 - a coordinator moving answers with errors
                continue
            self.polls += 1
            for tp in got:
                if tp.offset < 0:
                    continue
                was = self.highest.get(tp.partition, -1)
                if tp.offset < was:
                    self.backwards.append((tp.partition, was, tp.offset))
                self.highest[tp.partition] = max(was, tp.offset)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.consumer.close()


@pytest.mark.slow
def test_a_rolling_restart_under_load_loses_and_repeats_nothing(cluster_factory):
    cluster = cluster_factory(config=CONFIG)
    topic = topic_name("roll")
    create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})
    group_id = topic_name("g")
    producer = BackgroundProducer(cluster.bootstrap, topic, max_rate=1000).start()
    group = BackgroundGroup(cluster.bootstrap, topic, group_id).start()
    watch = CommitWatch(cluster.bootstrap, group_id, topic).start()
    try:
        wait_until(lambda: producer.acked_count > 500, "the producer under way")
        wait_until(lambda: group.count > 200, "the group reading")
        for broker in cluster.ids:
            acked, read = producer.acked_count, group.count
            assert cluster.stop(broker) == 0, cluster.log_text(broker)[-3000:]
            assert "controlled shutdown succeeded" in cluster.log_text(broker)
            wait_until(lambda acked=acked: producer.acked_count > acked + 200,
                       f"acks with broker {broker} down")
            cluster.start(broker)
            wait_full_isr(cluster, topic, PARTITIONS)
            wait_until(lambda read=read: group.count > read + 200, "the group reading on")
            # A poll after each restart, however many failed while the coordinator
            # moved: the watch below has looked at every stage, not only the first.
            wait_until(lambda polls=watch.polls: watch.polls > polls, "the commit watch polling on")
        wait_until(lambda: producer.acked_count > 500 + producer.acked_count // 2,
                   "the producer going on")
    except BaseException:
        producer.abandon()
        group.abandon()
        watch.stop()
        raise
    acked_records = producer.stop()
    assert not producer.failed, f"delivery failures: {producer.failed[:5]}"
    assert not producer.fatal
    assert len(acked_records) == producer.sent

    # Every acknowledged record, once, at its offset, in its key's order, on every
    # replica; the replicas byte for byte the same.
    replicas = converged(cluster, topic, PARTITIONS)
    assert_acknowledged_present(acked_records, replicas)
    wait_until(lambda: group.values() >= {a.value for a in acked_records},
               "the group reading every acknowledged record")
    final = {p: {r.offset: r.value for r in next(iter(replicas[p].values()))}
             for p in range(PARTITIONS)}
    for p, offset, value in group.read:
        assert final[p].get(offset) == value, f"group read {value!r} at {p}/{offset}"
    commits = group.stop_and_commit(PARTITIONS)
    assert commits == {p: max(final[p]) + 1 for p in range(PARTITIONS)}
    wait_until(lambda: watch.highest == commits, "the commit watch seeing the last commits")
    watch.stop()
    assert watch.polls > len(cluster.ids)
    assert not watch.backwards, f"committed offsets went back: {watch.backwards[:5]}"
