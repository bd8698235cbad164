"""Java kafka-clients 3.9 as a group member: it speaks the newest versions we serve
(JoinGroup 9, SyncGroup 5, OffsetCommit 9, OffsetFetch 9 with groups)."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .helpers import create_topic
from .java_support import JAVA_TIMEOUT, NEEDS_JAVA, compile_java

TIMEOUT = JAVA_TIMEOUT

pytestmark = [pytest.mark.slow, *NEEDS_JAVA]

# Reads `count` records as a member of `group`, commits, prints each as partition:offset.
SOURCE = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;

public class GroupMember {
    public static void main(String[] a) {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("group.id", a[1]);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("partition.assignment.strategy", a[4]);
        p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        int want = Integer.parseInt(a[3]);
        int got = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(a[2]));
            long deadline = System.currentTimeMillis() + 120_000;
            while (got < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    System.out.println(r.partition() + ":" + r.offset());
                    got++;
                }
            }
            c.commitSync();
        }
    }
}
"""


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("java-group")
    src = out / "GroupMember.java"
    src.write_text(SOURCE)
    return compile_java(out, src)


def member(classpath: str, bootstrap: str, group: str, topic: str, count: int,
           strategy: str) -> list[tuple[int, int]]:
    proc = subprocess.run(
        ["java", "-cp", classpath, "GroupMember", bootstrap, group, topic, str(count), strategy],
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return [tuple(map(int, line.split(":"))) for line in proc.stdout.decode().split()]


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(partitions):
        for _ in range(per_partition):
            p.produce(topic, b"v", partition=part)
    assert p.flush(30) == 0


@pytest.mark.parametrize(
    "strategy",
    [
        "org.apache.kafka.clients.consumer.RangeAssignor",
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    ],
)
def test_java_member_commits_and_resumes(broker, classpath, strategy):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 5, 2)
    first = member(classpath, broker.bootstrap, group, topic, 10, strategy)
    assert sorted(first) == [(p, o) for p in range(2) for o in range(5)]

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=30)
        assert [tp.offset for tp in committed] == [5, 5]
    finally:
        c.close()

    produce(broker.bootstrap, topic, 2, 2)
    second = member(classpath, broker.bootstrap, group, topic, 4, strategy)
    assert sorted(second) == [(p, o) for p in range(2) for o in (5, 6)]
