"""Partition reassignment (KIP-455) on a real ZooKeeper and four chronik brokers.

A partition moves to other brokers, or gains a replica, through AlterPartitionReassignments
and through the /admin/reassign_partitions znode of Kafka's ZooKeeper-mode tools: the new
replicas copy the log, join the ISR, the old ones leave and delete their copies, and a
real client reads every record afterwards. A reassignment whose new replica cannot catch
up (its broker frozen) stays listed by ListPartitionReassignments, survives kill -9 of
the controller and of the receiving broker, and completes once that broker is back; one
cancelled midway goes back to its original replicas and the copy made is deleted.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from chronik.protocol import errors

from .cli_support import chronik
from .cluster_support import Cluster, wait_until
from .helpers import (
    RawClient,
    code,
    confluent_produce,
    confluent_read,
    nested,
    req,
    sample_records,
)
from .helpers import topic_name as unique_topic
from .java_support import JAVA_TIMEOUT, compile_java, needs_java
from .replication_support import converged, frozen, isr

JAVA_SOURCE = Path(__file__).resolve().parents[1] / "compat" / "java" / "Reassign.java"

pytestmark = pytest.mark.slow

Targets = dict[tuple[str, int], list[int] | None]


def alter(bootstrap: str, targets: Targets) -> tuple[int, dict[tuple[str, int], int]]:
    """AlterPartitionReassignments v0: (top-level error, partition -> error)."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            nested(45, 0, "ReassignablePartition", partition_index=partition,
                   replicas=None if replicas is None else tuple(replicas))
        )
    with RawClient(bootstrap) as raw:
        response = raw.request(req(
            45, 0,
            topics=tuple(nested(45, 0, "ReassignableTopic", name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items()),
        ))
    return code(response.error_code), {
        (t.name, p.partition_index): code(p.error_code)
        for t in response.responses for p in t.partitions
    }


def ongoing(bootstrap: str) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments v0 of every topic: partition -> (replicas, adding,
    removing)."""
    with RawClient(bootstrap) as raw:
        response = raw.request(req(46, 0, topics=None))
    assert code(response.error_code) == errors.NONE
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                      list(p.removing_replicas))
        for t in response.topics for p in t.partitions
    }


def any_broker(cluster: Cluster) -> str:
    return cluster.broker(cluster.running()[0]).bootstrap


def controller(cluster: Cluster) -> str:
    return cluster.broker(cluster.controller_id()).bootstrap


def create(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)],
        operation_timeout=30,
    )
    futures[topic].result(timeout=60)
    cluster.wait_topic(topic, len(assignment))
    for p, replicas in enumerate(assignment):
        wait_until(lambda p=p, r=replicas: sorted(isr(cluster, topic, p)) == sorted(r),
                   f"{topic}-{p}'s ISR full")


def settled(cluster: Cluster, topic: str, expected: dict[int, list[int]]) -> None:
    wait_until(lambda: cluster.assignment(topic) == expected,
               f"{topic}'s replicas to become {expected}", timeout=90)
    wait_until(lambda: not [k for k in ongoing(any_broker(cluster)) if k[0] == topic],
               f"no reassignment of {topic} listed")
    for p, replicas in expected.items():
        wait_until(lambda p=p, r=replicas: sorted(isr(cluster, topic, p)) == sorted(r),
                   f"{topic}-{p}'s ISR to be {replicas}")


def test_partitions_move_and_grow_with_every_record(cluster_factory) -> None:
    cluster = cluster_factory(4)
    topic = unique_topic("move")
    create(cluster, topic, [[1, 2], [2, 1]])
    records = sample_records(3000, seed=5)
    confluent_produce(cluster.bootstrap, topic, records, acks="all")

    top, results = alter(controller(cluster), {(topic, 0): [3, 4], (topic, 1): [2, 1, 3]})
    assert top == errors.NONE
    assert results == {(topic, 0): errors.NONE, (topic, 1): errors.NONE}
    settled(cluster, topic, {0: [3, 4], 1: [2, 1, 3]})
    replicas = converged(cluster, topic, 2)
    assert sorted(replicas[0]) == [3, 4] and sorted(replicas[1]) == [1, 2, 3]
    assert sum(len(next(iter(r.values()))) for r in replicas.values()) == len(records)
    for broker in (1, 2):
        wait_until(lambda b=broker: not cluster.partition_dir(b, topic, 0).exists(),
                   f"broker {broker}'s copy of {topic}-0 deleted")
    state = cluster.partition_state(topic, 0)
    assert state["leader"] in (3, 4) and sorted(state["isr"]) == [3, 4]
    got = confluent_read(cluster.bootstrap, topic, 2, len(records))
    assert sorted(g.value for g in got) == sorted(r.value for r in records)

    # Kafka's ZooKeeper-mode tools write /admin/reassign_partitions; the controller
    # carries it out and deletes the znode once every partition is done.
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}
    cluster.zk.create("/admin/reassign_partitions", json.dumps(plan).encode(), makepath=True)
    settled(cluster, topic, {0: [1, 2], 1: [2, 1, 3]})
    wait_until(lambda: not cluster.exists("/admin/reassign_partitions"),
               "/admin/reassign_partitions deleted once done")
    converged(cluster, topic, 2)
    for broker in (3, 4):
        wait_until(lambda b=broker: not cluster.partition_dir(b, topic, 0).exists(),
                   f"broker {broker}'s copy of {topic}-0 deleted")


def test_a_copy_a_full_disk_kept_is_deleted_once_space_is_back(zookeeper, tmp_path) -> None:
    """Broker 3's data directory is a 32 MiB tmpfs, full when a reassignment moves the
    partition off it: its copy cannot be deleted then (the data dir's topic file cannot
    be rewritten). Once space is back it is deleted, without a restart and without any
    other change to the topic."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3)
    data = cluster.broker(3).data_dir
    data.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(data)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        cluster.start()
        topic = unique_topic("fulldisk")
        create(cluster, topic, [[1, 2, 3]])
        records = sample_records(300, seed=4)
        confluent_produce(cluster.bootstrap, topic, records, acks="all")
        converged(cluster, topic, 1)
        filler = data / "filler"
        with open(filler, "wb", buffering=0) as f:
            for size in (1 << 20, 4 << 10, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC

        top, results = alter(controller(cluster), {(topic, 0): [1, 2]})
        assert top == errors.NONE and results == {(topic, 0): errors.NONE}
        settled(cluster, topic, {0: [1, 2]})
        wait_until(lambda: "cannot delete the local copies" in cluster.log_text(3),
                   "broker 3 failing to delete its copy on the full disk")
        assert cluster.partition_dir(3, topic, 0).exists()

        filler.unlink()
        wait_until(lambda: not cluster.partition_dir(3, topic, 0).exists(),
                   "broker 3's copy deleted once space is back", timeout=30)
        assert cluster.log_text(3).count("cannot delete the local copies") == 1
        converged(cluster, topic, 1)
        got = confluent_read(cluster.bootstrap, topic, 1, len(records))
        assert sorted(g.value for g in got) == sorted(r.value for r in records)
    finally:
        cluster.close()
        subprocess.run(["umount", "-l", str(data)], check=False)


def test_refused_reassignments_get_kafkas_errors(cluster_factory) -> None:
    cluster = cluster_factory(3)
    topic = unique_topic("refused")
    create(cluster, topic, [[1, 2]])
    top, results = alter(controller(cluster), {
        (topic, 0): [1, 1],
        (topic, 7): [1, 2],
        ("no-such-topic", 0): [1],
    })
    assert top == errors.NONE
    assert results == {
        (topic, 0): errors.INVALID_REPLICA_ASSIGNMENT,
        (topic, 7): errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert alter(controller(cluster), {(topic, 0): [1, 9]})[1][(topic, 0)] == (
        errors.INVALID_REPLICA_ASSIGNMENT
    )
    assert alter(controller(cluster), {(topic, 0): []})[1][(topic, 0)] == (
        errors.INVALID_REPLICA_ASSIGNMENT
    )
    assert alter(controller(cluster), {(topic, 0): None})[1][(topic, 0)] == (
        errors.NO_REASSIGNMENT_IN_PROGRESS
    )
    other = next(i for i in cluster.ids if i != cluster.controller_id())
    top, results = alter(cluster.broker(other).bootstrap, {(topic, 0): [2, 3]})
    assert top == errors.NOT_CONTROLLER and results[(topic, 0)] == errors.NOT_CONTROLLER
    assert cluster.assignment(topic) == {0: [1, 2]}
    assert ongoing(any_broker(cluster)) == {}


def test_reassignment_survives_kills_and_a_cancel_rolls_back(cluster_factory) -> None:
    cluster = cluster_factory(4)
    topic = unique_topic("interrupted")
    # Broker 4 receives the new replicas; the controller must be another broker.
    if cluster.controller_id() == 4:
        cluster.stop(4)
        cluster.start(4)
    create(cluster, topic, [[1, 2], [1, 2]])
    records = sample_records(2000, seed=9)
    confluent_produce(cluster.bootstrap, topic, records, acks="all")

    with frozen(cluster, 4):
        top, results = alter(controller(cluster), {(topic, 0): [2, 4], (topic, 1): [2, 4]})
        assert top == errors.NONE and set(results.values()) == {errors.NONE}
        listed = wait_until(lambda: ongoing(controller(cluster)).get((topic, 0)),
                            "the reassignment listed")
        assert listed == ([2, 4, 1], [4], [1])
        # kafka-topics --describe's columns for a partition being moved.
        shown = chronik("topics", "describe", topic, bootstrap=controller(cluster))
        assert shown.returncode == 0, shown.stderr
        (line,) = [ln for ln in shown.stdout.splitlines() if "\tPartition: 0\t" in ln]
        assert "\tReplicas: 2,4,1\t" in line, line
        assert line.endswith("\tAdding Replicas: 4\tRemoving Replicas: 1"), line
        assert cluster.get_json(f"/brokers/topics/{topic}")["adding_replicas"] == {
            "0": [4], "1": [4]
        }
        # Cancelled while its new replica has copied nothing: back to brokers 1 and 2, in
        # the order the reassignment's list had them (Kafka keeps no other).
        top, results = alter(controller(cluster), {(topic, 1): None})
        assert results == {(topic, 1): errors.NONE}
        wait_until(lambda: cluster.assignment(topic)[1] == [2, 1], "the cancel written")
        wait_until(lambda: (topic, 1) not in ongoing(controller(cluster)), "the cancel listed")
        # kill -9 of the controller, and of the receiving broker, midway.
        old_controller = cluster.controller_id()
        cluster.kill(old_controller)
        cluster.kill(4)
    wait_until(lambda: cluster.controller_id() not in (-1, old_controller),
               "a new controller")
    assert wait_until(lambda: ongoing(controller(cluster)).get((topic, 0)),
                      "the reassignment listed by the new controller") == ([2, 4, 1], [4], [1])
    cluster.start(4)
    cluster.start(old_controller)
    settled(cluster, topic, {0: [2, 4], 1: [2, 1]})
    replicas = converged(cluster, topic, 2)
    assert sorted(replicas[0]) == [2, 4]
    wait_until(lambda: not cluster.partition_dir(1, topic, 0).exists(),
               "broker 1's copy of partition 0 deleted")
    wait_until(lambda: not cluster.partition_dir(4, topic, 1).exists(),
               "broker 4's copy of the cancelled partition deleted")
    got = confluent_read(cluster.bootstrap, topic, 2, len(records))
    assert sorted(g.value for g in got) == sorted(r.value for r in records)


@needs_java
def test_kafkas_java_admin_reassigns_and_lists(cluster_factory, tmp_path) -> None:
    """Java kafka-clients' Admin.alterPartitionReassignments and
    listPartitionReassignments, against a reassignment held up by a frozen broker."""
    classpath = compile_java(tmp_path / "classes", JAVA_SOURCE)

    def java(*args: str) -> list[list[str]]:
        proc = subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "Reassign",
             *args],
            capture_output=True, timeout=JAVA_TIMEOUT,
        )
        assert proc.returncode == 0, proc.stderr.decode()[-4000:]
        return [line.split("\t") for line in proc.stdout.decode().splitlines()]

    # Each Java run takes seconds: the frozen broker keeps its registration meanwhile.
    cluster = cluster_factory(3, {"zookeeper.session.timeout.ms": "40000"})
    if cluster.controller_id() == 3:
        cluster.stop(3)
        cluster.start(3)
    topic = unique_topic("java")
    create(cluster, topic, [[1, 2], [2, 1]])
    records = sample_records(500, seed=3)
    confluent_produce(cluster.bootstrap, topic, records, acks="all")
    # Not through the frozen broker, which would take the connection and never answer.
    live = ",".join(cluster.broker(i).bootstrap for i in (1, 2))
    with frozen(cluster, 3):
        out = java("alter", live, f"{topic}:1=2,1,3", f"{topic}:5=1,2")
        results = {(r[1], int(r[2])): r[3] for r in out if r[0] == "result"}
        assert results[(topic, 1)] == "ok"
        assert results[(topic, 5)] == "UnknownTopicOrPartitionException"
        listed = {(r[1], int(r[2])): r[3:] for r in java("list", live)
                  if r[0] == "ongoing"}
        assert listed[(topic, 1)] == ["2,1,3", "3", ""]
        out = java("alter", live, f"{topic}:0=1,3", f"{topic}:1=cancel")
        assert {(r[1], int(r[2])): r[3] for r in out if r[0] == "result"} == {
            (topic, 0): "ok", (topic, 1): "ok"
        }
        assert wait_until(lambda: cluster.assignment(topic)[1] == [2, 1], "the cancel")
        out = java("alter", live, f"{topic}:1=cancel", f"{topic}:0=1,1")
        assert {(r[1], int(r[2])): r[3] for r in out if r[0] == "result"} == {
            (topic, 1): "NoReassignmentInProgressException",
            (topic, 0): "InvalidReplicaAssignmentException",
        }
    settled(cluster, topic, {0: [1, 3], 1: [2, 1]})
    assert [r for r in java("list", live) if r[0] == "ongoing"] == []
    converged(cluster, topic, 2)
    got = confluent_read(cluster.bootstrap, topic, 2, len(records))
    assert sorted(g.value for g in got) == sorted(r.value for r in records)
