"""`chronik partitions reassign`, `chronik cluster rebalance` and `chronik cluster
decommission` against a real ZooKeeper and chronik brokers, run as an operator runs them
(`python -m chronik ...`), with a real client reading every record after each move."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from chronik.cli.reassignment_json import format_reassignment

from .cli_support import Result, chronik
from .cluster_support import Cluster, wait_until
from .helpers import BASE_TS, Sent, confluent_produce, confluent_read
from .helpers import topic_name as unique_topic
from .replica_check import log_end_offset
from .replication_support import converged
from .test_cluster_reassignment import controller, create, ongoing, settled

pytestmark = pytest.mark.slow

THROTTLE_KEYS = ("leader.replication.throttled.replicas",
                 "follower.replication.throttled.replicas")
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def run(cluster: Cluster, *args: str, via: int = 1, timeout: float = 180) -> Result:
    return chronik(*args, bootstrap=cluster.broker(via).bootstrap, timeout=timeout)


def ok(cluster: Cluster, *args: str, via: int = 1, timeout: float = 180) -> list[str]:
    result = run(cluster, *args, via=via, timeout=timeout)
    assert result.returncode == 0, (
        f"chronik {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    )
    return result.lines


def fails(cluster: Cluster, *args: str, code: int = 1) -> str:
    result = run(cluster, *args)
    assert result.returncode == code, result.stdout + result.stderr
    assert len(result.error_lines) == 1, result.stderr
    return result.error_lines[0]


def random_records(n: int, seed: int, size: int = 2048) -> list[Sent]:
    """Records of `size` random bytes (which no codec shrinks), each with its own key so
    every partition gets some. At 2 KB, a few MB a partition: more than one fetch
    carries, so a throttle of 1 byte/s holds a copy back."""
    rnd = random.Random(seed)
    return [Sent(f"key-{i}".encode(), f"v{i:05d}:".encode() + rnd.randbytes(size), (),
                 BASE_TS + i) for i in range(n)]


def configs(cluster: Cluster, kind: ResourceType, name: str) -> dict[str, str | None]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def counts(cluster: Cluster, topics: list[str]) -> Counter[int]:
    c: Counter[int] = Counter()
    for topic in topics:
        for replicas in cluster.assignment(topic).values():
            c.update(replicas)
    return c


def test_generate_execute_verify_moves_a_topic_with_every_record(
    cluster_factory, tmp_path: Path
) -> None:
    cluster = cluster_factory(4)
    topic = unique_topic("moved")
    create(cluster, topic, [[1, 2], [2, 3]])
    records = random_records(4000, seed=3)
    confluent_produce(cluster.bootstrap, topic, records, acks="all")

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    lines = ok(cluster, "partitions", "reassign", "--generate", "--topics-to-move-json-file",
               str(topics_file), "--broker-list", "3,4")
    assert lines[0] == "Current partition replica assignment"
    assert lines[1] == format_reassignment({(topic, 0): [1, 2], (topic, 1): [2, 3]})
    assert lines[2:4] == ["", "Proposed partition reassignment configuration"]
    proposed = json.loads(lines[4])
    assert len(lines) == 5
    assert [(p["topic"], p["partition"]) for p in proposed["partitions"]] == [
        (topic, 0), (topic, 1)
    ]
    for p in proposed["partitions"]:
        assert sorted(p["replicas"]) == [3, 4] and p["log_dirs"] == ["any", "any"]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(lines[4])
    target = {p["partition"]: p["replicas"] for p in proposed["partitions"]}

    # A throttle of 1 byte/s holds the copy back until --verify has seen it in progress.
    lines = ok(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
               str(plan_file), "--throttle", "1")
    assert lines == [
        "Current partition replica assignment",
        "",
        format_reassignment({(topic, 0): [1, 2], (topic, 1): [2, 3]}),
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, "
        "to ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 1 B/s",
        f"Successfully started partition reassignments for {topic}-0,{topic}-1",
    ]
    # Kafka's throttle: existing replicas lead-throttled, new ones follow-throttled.
    assert {k: v for k, v in configs(cluster, ResourceType.TOPIC, topic).items()
            if k in THROTTLE_KEYS} == {
        "leader.replication.throttled.replicas": "0:1,0:2,1:2,1:3",
        "follower.replication.throttled.replicas": "0:3,0:4,1:4",
    }
    for broker in (1, 2, 3, 4):
        got = configs(cluster, ResourceType.BROKER, str(broker))
        assert {k: got.get(k) for k in RATE_KEYS} == dict.fromkeys(RATE_KEYS, "1")

    lines = ok(cluster, "partitions", "reassign", "--verify", "--reassignment-json-file",
               str(plan_file), "--preserve-throttles")
    assert lines == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is still in progress.",
        f"Reassignment of partition {topic}-1 is still in progress.",
        "",
    ]
    listed = ok(cluster, "partitions", "reassign", "--list")
    assert listed[0] == "Current partition reassignments:"
    assert listed[1].startswith(f"{topic}-0: replicas: ") and " adding: " in listed[1]
    # Run again without --additional: refused, as Kafka refuses it.
    assert "Use --additional to override this" in fails(
        cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
        str(plan_file))
    # The throttle raised (resubmitting with --additional), the copy completes.
    ok(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
       str(plan_file), "--throttle", "100000000", "--additional")
    settled(cluster, topic, target)

    lines = ok(cluster, "partitions", "reassign", "--verify", "--reassignment-json-file",
               str(plan_file))
    assert lines == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        f"Clearing topic-level throttles on topic {topic}",
    ]
    assert not set(configs(cluster, ResourceType.TOPIC, topic)) & set(THROTTLE_KEYS)
    for broker in (1, 2, 3, 4):
        assert not set(configs(cluster, ResourceType.BROKER, str(broker))) & set(RATE_KEYS)

    for broker in (1, 2):
        wait_until(lambda b=broker: not cluster.partition_dir(b, topic, 0).exists(),
                   f"broker {broker}'s copy of {topic}-0 deleted")
    replicas = converged(cluster, topic, 2)
    assert {p: sorted(r) for p, r in replicas.items()} == {0: [3, 4], 1: [3, 4]}
    got = confluent_read(cluster.bootstrap, topic, 2, len(records))
    assert sorted(g.value for g in got) == sorted(r.value for r in records)


def test_cancel_goes_back_and_mistakes_are_one_line(cluster_factory, tmp_path: Path) -> None:
    cluster = cluster_factory(3)
    topic = unique_topic("cancelled")
    create(cluster, topic, [[1, 2]])
    records = random_records(2000, seed=4)
    confluent_produce(cluster.bootstrap, topic, records, acks="all")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(format_reassignment({(topic, 0): [3, 2]}))

    ok(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
       str(plan_file), "--throttle", "1")
    wait_until(lambda: (topic, 0) in ongoing(controller(cluster)), "the reassignment listed")
    # Mid-copy: broker 3 holds the new replica, held back by the throttle short of the
    # 2000 records.
    copy = cluster.partition_dir(3, topic, 0)
    wait_until(copy.exists, "broker 3's new replica created")
    assert log_end_offset(copy) < len(records)
    lines = ok(cluster, "partitions", "reassign", "--cancel", "--reassignment-json-file",
               str(plan_file))
    assert lines == [
        f"Successfully cancelled partition reassignment for: {topic}-0",
        "None of the specified partition moves are active.",
        "Clearing broker-level throttles on brokers 1,2,3",
        f"Clearing topic-level throttles on topic {topic}",
    ]
    # Back to brokers 1 and 2, in the order the reassignment's list had them (target
    # first: 3,2,1), as Kafka's controller, which keeps no other, does.
    settled(cluster, topic, {0: [2, 1]})
    wait_until(lambda: not cluster.partition_dir(3, topic, 0).exists(),
               "broker 3's copy deleted")
    assert not set(configs(cluster, ResourceType.TOPIC, topic)) & set(THROTTLE_KEYS)
    lines = ok(cluster, "partitions", "reassign", "--cancel", "--reassignment-json-file",
               str(plan_file), "--preserve-throttles")
    assert lines == ["None of the specified partition reassignments are active.",
                     "None of the specified partition moves are active."]
    lines = ok(cluster, "partitions", "reassign", "--verify", "--reassignment-json-file",
               str(plan_file), "--preserve-throttles")
    assert lines[1] == (f"There is no active reassignment of partition {topic}-0, but replica "
                        "set is 2,1 rather than 3,2.")
    got = confluent_read(cluster.bootstrap, topic, 1, len(records))
    assert sorted(g.value for g in got) == sorted(r.value for r in records)

    # What the cluster refuses: one line, exit 1; nothing started.
    plan_file.write_text(format_reassignment({(topic, 0): [1, 9]}))
    assert fails(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
                 str(plan_file)) == "chronik: error: Unknown broker id 9"
    plan_file.write_text(format_reassignment({(topic, 5): [1, 2]}))
    assert fails(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
                 str(plan_file)) == f"chronik: error: Unable to find partition: {topic}-5"
    plan_file.write_text(format_reassignment({("no-such-topic", 0): [1, 2]}))
    assert fails(cluster, "partitions", "reassign", "--execute", "--reassignment-json-file",
                 str(plan_file)) == "chronik: error: Topic no-such-topic not found."
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"topics": [{"topic": topic}]}))
    assert fails(cluster, "partitions", "reassign", "--generate", "--topics-to-move-json-file",
                 str(topics_file), "--broker-list", "1,7") == "chronik: error: Unknown broker id 7"
    assert fails(cluster, "partitions", "reassign", "--generate", "--topics-to-move-json-file",
                 str(topics_file), "--broker-list", "1") == (
        f"chronik: error: {topic}: Replication factor: 2 larger than available brokers: 1."
    )
    assert fails(cluster, "cluster", "decommission", "9") == (
        "chronik: error: broker 9 is not in the cluster and holds no replicas"
    )
    assert cluster.assignment(topic) == {0: [2, 1]}
    assert ongoing(controller(cluster)) == {}


def test_rebalance_onto_a_new_broker_then_decommission_one(zookeeper, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 4)
    try:
        cluster.start(1, 2, 3)
        topics = [unique_topic("spread"), unique_topic("spread")]
        create(cluster, topics[0], [[1 + p % 3, 1 + (p + 1) % 3] for p in range(6)])
        create(cluster, topics[1], [[1 + p % 3, 1 + (p + 2) % 3] for p in range(6)])
        records = {t: random_records(600, seed=i, size=100) for i, t in enumerate(topics)}
        for t in topics:
            confluent_produce(cluster.bootstrap, t, records[t], acks="all")
        cluster.start(4)
        before = {t: cluster.assignment(t) for t in topics}
        assert counts(cluster, topics) == {1: 8, 2: 8, 3: 8}

        # 24 replicas over 4 brokers: 6 each, so 6 replicas (a quarter) move to broker 4.
        dry = ok(cluster, "cluster", "rebalance", "--dry-run", *sum(
            (["--topic", t] for t in topics), []))
        # Sizes in bytes, from each broker's DescribeLogDirs.
        table = [line.split() for line in dry[1:5]]
        assert dry[0].split() == ["BROKER", "RACK", "REPLICAS", "AFTER", "LEADERS", "AFTER"]
        assert {int(row[0]): (int(row[2]), int(row[3])) for row in table} == {
            1: (8, 6), 2: (8, 6), 3: (8, 6), 4: (0, 6)
        }
        summary = next(line for line in dry if line.startswith("Moves "))
        assert summary.startswith("Moves 6 replicas of 6 partitions: ")
        assert " bytes) (at least " in summary
        plan = json.loads(dry[-1])
        assert dry[-2] == "Proposed partition reassignment configuration"
        assert {t: cluster.assignment(t) for t in topics} == before, "the dry run moved"

        lines = ok(cluster, "cluster", "rebalance", "--throttle", "50000000", "--timeout", "120",
                   *sum(
            (["--topic", t] for t in topics), []), via=2)
        total = len(plan["partitions"])
        assert any(line.startswith("Successfully started partition reassignments for ")
                   for line in lines)
        assert f"{total} of {total} partition reassignments done." in lines
        assert "The replication throttles were removed." in lines
        after = counts(cluster, topics)
        assert after == {1: 6, 2: 6, 3: 6, 4: 6}, after
        for t in topics:
            for p, replicas in cluster.assignment(t).items():
                assert any(e["topic"] == t and e["partition"] == p and e["replicas"] == replicas
                           for e in plan["partitions"]) or replicas == before[t][p]
        leaders: Counter[int] = Counter()
        for t in topics:
            for p in range(6):
                leaders[wait_until(lambda t=t, p=p: cluster.assignment(t)[p][0] ==
                                   cluster.partition_state(t, p)["leader"] and
                                   cluster.partition_state(t, p)["leader"],
                                   "the preferred leader elected")] += 1
        assert sorted(leaders.values()) == [3, 3, 3, 3], leaders
        # Already balanced: nothing to move.
        again = ok(cluster, "cluster", "rebalance", "--dry-run", *sum(
            (["--topic", t] for t in topics), []))
        assert "The replicas and leaders are balanced: nothing to move." in again

        lines = ok(cluster, "cluster", "decommission", "2", "--timeout", "120", via=3)
        assert lines[-1] == "Broker 2 holds no replicas now: it may be stopped."
        after = counts(cluster, topics)
        assert after[2] == 0 and sorted(after.values()) == [8, 8, 8], after
        for t in topics:
            for p in range(6):
                wait_until(lambda t=t, p=p: not cluster.partition_dir(2, t, p).exists(),
                           f"broker 2's copy of {t}-{p} deleted")
        assert cluster.stop(2) == 0
        for t in topics:
            converged(cluster, t, 6)
            got = confluent_read(cluster.broker(1).bootstrap, t, 6, len(records[t]))
            assert sorted(g.value for g in got) == sorted(r.value for r in records[t])
    finally:
        cluster.close()
