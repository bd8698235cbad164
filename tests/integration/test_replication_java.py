"""Java kafka-clients' default producer (idempotent, acks=all) and confluent-kafka keep
producing through a leader kill -9 on a three-broker cluster, with no duplicate and no
loss: each numbered record is on every replica exactly once, at the offset its
acknowledgement gave, and a partition's numbers ascend (one producer, sent in order).

The Java program (below) is compiled once per module with javac against the jars in
$CHRONIK_KAFKA_JARS, else .cache/kafka-java (scripts/install-test-deps.sh puts them there).
"""

from __future__ import annotations

import subprocess
import threading

import pytest

from .cluster_support import wait_until
from .helpers import topic_name
from .java_support import JAVA_TIMEOUT, NEEDS_JAVA, compile_java
from .replica_check import Acked, assert_acknowledged_present
from .replication_support import (
    REPLICATION_CONFIG,
    BackgroundProducer,
    converged,
    create_replicated_topic,
    leader,
    wait_full_isr,
)

TIMEOUT = JAVA_TIMEOUT
PARTITIONS = 3
COUNT = 4000

pytestmark = [pytest.mark.slow, *NEEDS_JAVA]

# Sends records n = 0..count-1 (key "k<n % 30>", value "n<n>"), paced at about
# `perSecond`, with the producer's defaults (enable.idempotence=true, acks=all) and a
# delivery timeout longer than a failover; prints "acked <partition> <offset> <n>" or
# "failed <n> <error>" per record.
SOURCE = """
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class NumberedProducer {
    public static void main(String[] a) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", a[0]);
        p.put("delivery.timeout.ms", "120000");
        p.put("request.timeout.ms", "10000");
        p.put("linger.ms", "5");
        String topic = a[1];
        int count = Integer.parseInt(a[2]);
        int perSecond = Integer.parseInt(a[3]);
        long start = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int n = 0; n < count; n++) {
                final int number = n;
                byte[] key = ("k" + (n % 30)).getBytes();
                byte[] value = ("n" + n).getBytes();
                producer.send(new ProducerRecord<>(topic, key, value), (md, e) -> {
                    synchronized (System.out) {
                        if (e != null) {
                            System.out.println("failed\\t" + number + "\\t" + e);
                        } else {
                            System.out.println(
                                "acked\\t" + md.partition() + "\\t" + md.offset() + "\\t" + number);
                        }
                        System.out.flush();
                    }
                });
                long due = start + (long) n * 1_000_000_000L / perSecond;
                long wait = due - System.nanoTime();
                if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            producer.flush();
        }
    }
}
"""


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("java-numbered")
    src = out / "NumberedProducer.java"
    src.write_text(SOURCE)
    return compile_java(out, src)


class JavaProducer:
    """The Java program running, its reports collected as they arrive."""

    def __init__(self, classpath: str, bootstrap: str, topic: str, count: int, rate: int):
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath,
             "NumberedProducer", bootstrap, topic, str(count), str(rate)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.acked: list[tuple[int, int, int]] = []  # (n, partition, offset)
        self.failed: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "acked":
                self.acked.append((int(fields[3]), int(fields[1]), int(fields[2])))
            elif fields[0] == "failed":
                self.failed.append(line.strip())

    def wait(self) -> None:
        try:
            code = self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        stderr = self.proc.stderr.read() if self.proc.stderr else ""
        assert code == 0, stderr[-4000:]


def test_java_and_confluent_producers_through_a_leader_kill(cluster_factory, classpath):
    cluster = cluster_factory(config=REPLICATION_CONFIG)
    java_topic, confluent_topic = topic_name("java"), topic_name("confluent")
    for topic in (java_topic, confluent_topic):
        create_replicated_topic(cluster, topic, PARTITIONS, **{"min.insync.replicas": "2"})

    java = JavaProducer(classpath, cluster.bootstrap, java_topic, COUNT, rate=300)
    confluent = BackgroundProducer(cluster.bootstrap, confluent_topic, max_rate=300).start()
    try:
        wait_until(lambda: len(java.acked) >= 500, "the Java producer under way", timeout=90)
        victim = leader(cluster, java_topic, 0)
        cluster.kill(victim)
        wait_until(lambda: leader(cluster, java_topic, 0) not in (victim, -1),
                   f"a new leader for {java_topic}-0")
        cluster.start(victim)
        java.wait()
    except BaseException:
        confluent.abandon()
        if java.proc.poll() is None:
            java.proc.kill()
        raise
    confluent_acked = confluent.stop()
    wait_full_isr(cluster, java_topic, PARTITIONS)

    # Java: every number acknowledged once, and stored once, in order, at its offset.
    assert not java.failed, java.failed[:5]
    numbers = sorted(n for n, _, _ in java.acked)
    assert numbers == list(range(COUNT)), "a number acknowledged twice or never"
    replicas = converged(cluster, java_topic, PARTITIONS)
    acked = [
        Acked(p, offset, f"k{n % 30}".encode(), f"n{n}".encode())
        for n, p, offset in sorted(java.acked)
    ]
    assert_acknowledged_present(acked, replicas)
    stored = 0
    for p, per_broker in replicas.items():
        for broker_id, records in per_broker.items():
            log = [int(r.value[1:]) for r in records if r.value]
            assert log == sorted(log), f"{java_topic}-{p} on broker {broker_id} out of order"
        stored += len(next(iter(per_broker.values())))
    assert stored == COUNT, f"{stored} records stored for {COUNT} sent"

    # confluent-kafka, through the same kill.
    assert not confluent.failed, confluent.failed[:5]
    assert len(confluent_acked) == confluent.sent
    wait_full_isr(cluster, confluent_topic, PARTITIONS)
    replicas = converged(cluster, confluent_topic, PARTITIONS)
    assert_acknowledged_present(confluent_acked, replicas)
    assert sum(len(next(iter(b.values()))) for b in replicas.values()) == len(confluent_acked)
