"""Java kafka-clients' transactions against chronik: a transactional producer commits to
two partitions with its consumer's offsets, aborts another transaction, and is fenced by
a second producer of the same transactional.id; read_committed and read_uncommitted
consumers, the group's committed offset, and the Admin client's transaction APIs
(listTransactions, describeTransactions, describeProducers) see what Kafka would show.

The Java program (below) is compiled once per module with javac against the jars in
$CHRONIK_KAFKA_JARS, else .cache/kafka-java (scripts/install-test-deps.sh puts them there).
"""

from __future__ import annotations

import subprocess

import pytest

from .helpers import create_topic, topic_name
from .java_support import JAVA_TIMEOUT, NEEDS_JAVA, compile_java

pytestmark = NEEDS_JAVA

SOURCE = """
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxnClient {
    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        KafkaProducer<String, String> producer =
            new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        producer.initTransactions();
        return producer;
    }

    static List<String> read(String bootstrap, String topic, String isolation) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps =
                List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200)))
                    out.add(r.value());
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp) >= end.get(tp);
                if (done) break;
            }
        }
        Collections.sort(out);
        return out;
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], input = a[2], group = a[3], txnId = a[4];
        KafkaProducer<String, String> first = producer(bootstrap, txnId);
        first.beginTransaction();
        for (int i = 0; i < 4; i++) first.send(new ProducerRecord<>(topic, i % 2, null, "c" + i));
        first.sendOffsetsToTransaction(
            Map.of(new TopicPartition(input, 0), new OffsetAndMetadata(7)),
            new ConsumerGroupMetadata(group));
        first.commitTransaction();
        first.beginTransaction();
        for (int i = 0; i < 2; i++) first.send(new ProducerRecord<>(topic, i % 2, null, "a" + i));
        first.flush();
        first.abortTransaction();

        first.beginTransaction();
        first.send(new ProducerRecord<>(topic, 0, null, "zombie"));
        first.flush();
        KafkaProducer<String, String> second = producer(bootstrap, txnId);
        try {
            first.commitTransaction();
            System.out.println("zombie committed");
        } catch (Exception e) {
            System.out.println("fenced " + e.getClass().getSimpleName());
        }
        first.close(Duration.ofSeconds(5));
        second.beginTransaction();
        second.send(new ProducerRecord<>(topic, 1, null, "c4"));
        second.commitTransaction();

        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            for (TransactionListing t : admin.listTransactions().all().get())
                if (t.transactionalId().equals(txnId))
                    System.out.println("listed " + t.state());
            TransactionDescription d =
                admin.describeTransactions(List.of(txnId)).all().get().get(txnId);
            System.out.println("described " + d.state() + " " + d.producerEpoch());
            TopicPartition p0 = new TopicPartition(topic, 0);
            var ps = admin.describeProducers(List.of(p0)).all().get().get(p0);
            System.out.println("producers " + ps.activeProducers().size());
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            System.out.println("offset " + committed.get(new TopicPartition(input, 0)).offset());
        }
        second.close();
        List<String> committed = read(bootstrap, topic, "read_committed");
        List<String> everything = read(bootstrap, topic, "read_uncommitted");
        System.out.println("committed " + String.join(",", committed));
        System.out.println("uncommitted " + String.join(",", everything));
    }
}
"""


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("java-txn")
    source = out / "TxnClient.java"
    source.write_text(SOURCE)
    return compile_java(out, source)


def test_java_transactions(broker_process, classpath: str):
    bootstrap = broker_process.bootstrap
    topic = topic_name("jtxn")
    source = topic_name("jin")
    create_topic(bootstrap, topic, partitions=2)
    create_topic(bootstrap, source)
    proc = subprocess.run(
        [
            "java",
            "-cp",
            classpath,
            "TxnClient",
            bootstrap,
            topic,
            source,
            topic_name("jg"),
            topic_name("jtid"),
        ],
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "fenced ProducerFencedException" in lines, proc.stdout
    assert "listed CompleteCommit" in lines
    # Epoch 0, bumped once by the abort that fenced it and once for the new producer.
    assert "described CompleteCommit 2" in lines
    assert "producers 1" in lines
    assert "offset 7" in lines
    assert "committed c0,c1,c2,c3,c4" in lines
    assert "uncommitted a0,a1,c0,c1,c2,c3,c4,zombie" in lines
