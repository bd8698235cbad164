"""Pieces the replication fault tests share: replicated topics, waiting on the ISR kept
in ZooKeeper, a producer and a consumer group running in threads while brokers die, and
a broker frozen with SIGSTOP."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9 import request as produce

from .cluster_support import Cluster, wait_until
from .replica_check import (
    Acked,
    Stored,
    assert_no_duplicates,
    assert_replicas_agree,
    high_watermark,
    log_end_offset,
    replica_dirs,
    replica_records,
)

# Short enough that a frozen follower leaves the ISR well within the ZooKeeper session
# timeout (6 s), so freezing a broker does not also end its session.
LAG_MS = 2000
REPLICATION_CONFIG = {
    "replica.lag.time.max.ms": str(LAG_MS),
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "unclean.leader.election.enable": "false",
}
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REQUEST_TIMED_OUT = 7


def produce_request(topic: str, partition: int, data: bytes, acks: int = -1,
                    timeout_ms: int = 30_000) -> produce.ProduceRequest:
    """A Produce v9 of one batch to one partition."""
    return produce.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            produce.TopicProduceData(
                name=topic,
                partition_data=(produce.PartitionProduceData(index=partition, records=data),),
            ),
        ),
    )


def create_replicated_topic(
    cluster: Cluster, topic: str, partitions: int, rf: int = 3, **config: str
) -> None:
    """Create the topic and wait until every partition has a live leader and its whole
    replica set in the ISR."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=rf, config=config)],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[topic].result(timeout=60)
    cluster.wait_topic(topic, partitions)
    wait_full_isr(cluster, topic, partitions)


def isr(cluster: Cluster, topic: str, partition: int) -> list[int]:
    return list(cluster.partition_state(topic, partition)["isr"])


def leader(cluster: Cluster, topic: str, partition: int) -> int:
    return int(cluster.partition_state(topic, partition)["leader"])


def wait_full_isr(cluster: Cluster, topic: str, partitions: int, timeout: float = 60) -> None:
    """Every partition's ISR (its state znode) holds all its replicas."""
    assignment = cluster.assignment(topic)
    for p in range(partitions):
        wait_until(
            lambda p=p: sorted(isr(cluster, topic, p)) == sorted(assignment[p]),
            f"{topic}-{p}'s ISR back to {assignment[p]}",
            timeout,
        )


@contextlib.contextmanager
def frozen(cluster: Cluster, broker_id: int) -> Iterator[None]:
    """SIGSTOP the broker for the block's length; SIGCONT after, whatever happens."""
    proc = cluster.broker(broker_id).proc
    assert proc is not None and proc.poll() is None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)


def converged(
    cluster: Cluster, topic: str, partitions: int
) -> dict[int, dict[int, list[Stored]]]:
    """Wait until each partition's replicas all end at its high watermark, check they
    agree byte for byte, and return partition -> broker -> records."""
    out: dict[int, dict[int, list[Stored]]] = {}
    for p in range(partitions):
        dirs = replica_dirs(cluster, topic, p)

        def caught_up(dirs: dict = dirs, p: int = p) -> int | None:
            hw = high_watermark(cluster.bootstrap, topic, p)
            ends = {log_end_offset(d) for d in dirs.values()}
            return hw if ends == {hw} and hw > 0 else None

        hw = wait_until(caught_up, f"{topic}-{p}'s replicas all at its high watermark")
        records = assert_replicas_agree(dirs, hw)
        assert_no_duplicates(records, f"{topic}-{p}")
        out[p] = {i: replica_records(d, hw) for i, d in dirs.items()}
    return out


class BackgroundProducer:
    """An idempotent acks=all confluent-kafka producer sending keyed records as fast as
    the brokers take them (at most `max_rate` a second, so a run's data stays small
    enough to check), recording each delivery report. Values are unique
    (`<key>:<producer>:<sequence>`), so a record can be found on every replica."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        keys: int = 60,
        max_rate: float = 2000,
        **config: Any,
    ) -> None:
        self.topic = topic
        self.keys = [f"key-{k:03d}".encode() for k in range(keys)]
        self.tag = f":{uuid.uuid4().hex[:6]}".encode()
        self.max_rate = max_rate
        self.config = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Longer than any failover in the tests: a record is retried, never dropped.
            "message.timeout.ms": 120_000,
            "queue.buffering.max.messages": 20_000,
            **config,
        }
        self.acked: list[tuple[int, Acked]] = []  # (sequence, record)
        self.failed: list[tuple[bytes, str]] = []
        self.fatal: list[str] = []
        self.sent = 0
        self.unflushed = -1
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def acked_since(self, count: int, partitions: set[int] | None = None) -> int:
        """Records acknowledged after the first `count`, on `partitions` (all when None)."""
        with self._lock:
            later = self.acked[count:]
        return sum(1 for _, a in later if partitions is None or a.partition in partitions)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(str(err))

    def _run(self) -> None:
        try:
            producer = Producer({**self.config, "error_cb": self._on_error})

            def report(seq: int, key: bytes, value: bytes):
                def on_delivery(err: Any, msg: Any) -> None:
                    with self._lock:
                        if err is not None:
                            self.failed.append((value, str(err)))
                        else:
                            self.acked.append(
                                (seq, Acked(msg.partition(), msg.offset(), key, value))
                            )

                return on_delivery

            started = time.monotonic()
            while not self._stop.is_set() and not self.fatal:
                if self.sent > self.max_rate * (time.monotonic() - started):
                    producer.poll(0.01)
                    continue
                key = self.keys[self.sent % len(self.keys)]
                value = key + self.tag + f":{self.sent:09d}".encode()
                try:
                    producer.produce(
                        self.topic, key=key, value=value,
                        on_delivery=report(self.sent, key, value),
                    )
                except BufferError:
                    producer.poll(0.05)
                    continue
                self.sent += 1
                producer.poll(0)
            self.unflushed = producer.flush(150)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def abandon(self) -> None:
        """Stop sending, without waiting for the outstanding reports (a test failed)."""
        self._stop.set()

    def finish(self) -> list[Acked]:
        """Stop sending and wait for the reports; the acknowledged records in send order,
        whatever became of the producer (one whose acknowledged records were lost fails
        fatally: its next sequence is out of order)."""
        self._stop.set()
        self._thread.join(180)
        with self._lock:
            return [a for _, a in sorted(self.acked, key=lambda sa: sa[0])]

    def stop(self) -> list[Acked]:
        """Stop sending, wait for every report; the acknowledged records in send order."""
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "producer still flushing after 180 s"
        assert self.error is None, repr(self.error)
        assert not self.fatal, f"producer fatal error: {self.fatal}"
        assert self.unflushed == 0, f"{self.unflushed} records never reported"
        return [a for _, a in sorted(self.acked, key=lambda sa: sa[0])]


class BackgroundGroup:
    """A consumer group member reading the topic in a thread, committing as it goes
    (auto commit), and recording what it read: (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.topic = topic
        self.group = group
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        })
        self.read: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BackgroundGroup:
        self.consumer.subscribe([self.topic])
        self._thread.start()
        return self

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.read)

    def values(self) -> set[bytes]:
        with self._lock:
            return {v for _, _, v in self.read}

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.consume(500, 0.2):
                if m.error() is not None:
                    # Partition EOF and transient broker errors are not data.
                    self.errors.append(str(m.error()))
                    continue
                with self._lock:
                    self.read.append((m.partition(), m.offset(), m.value()))

    def abandon(self) -> None:
        """Stop reading (a test failed); the consumer is left to the garbage collector."""
        self._stop.set()
        self._thread.join(10)

    def stop_and_commit(self, partitions: int) -> dict[int, int]:
        """Stop reading, commit the positions reached, close; the committed offsets."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        tps = [TopicPartition(self.topic, p) for p in range(partitions)]
        positions = self.consumer.position(tps)
        commit = [tp for tp in positions if tp.offset >= 0]
        self.consumer.commit(offsets=commit, asynchronous=False)
        self.consumer.close()
        return {tp.partition: tp.offset for tp in commit}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as its coordinator answers (OffsetFetch)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=30
        )
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
    finally:
        consumer.close()
