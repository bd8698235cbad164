"""An idempotent producer's pipelined writes while leader epochs go up under staying
leaders, on three brokers.

A leader whose epoch goes up while it stays the leader (a reassignment completed, which
fences the replicas it removed) keeps taking writes at the epoch it has until it takes up
the new one, as Kafka's leader does until its LeaderAndIsr arrives. Refusing one batch
for that moment (NOT_LEADER_OR_FOLLOWER, nothing written) let the next pipelined batch
reach the sequence check with a gap (OUT_OF_ORDER_SEQUENCE_NUMBER); librdkafka answers
that by bumping its producer epoch and sending again, with new sequence numbers, every
batch it has not seen acknowledged, on every partition, including ones that were
written but whose answer was an error (a timeout, a leader move): they were stored twice.

The first test drives Produce over a raw socket, five requests in flight, so that every
answer is seen; the second runs confluent-kafka's idempotent producer through such epochs
while written batches of other partitions time out and are retried, and checks that each
acknowledged record is stored once, that no two records of a replica have the same
producer id and value, and that the producer never started a new epoch. Leader moves are
left out of the second: across them librdkafka can send a later batch to the new leader
before it retries an earlier one, and bump its epoch on the answer, against Kafka too
(librdkafka issue 4953).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import Counter, deque
from typing import Any

import pytest
from kio.schema.init_producer_id import v4 as init_producer_id
from kio.schema.produce.v9 import request as produce

from chronik.protocol import errors
from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_records

from .cluster_support import Cluster, wait_until
from .helpers import RawClient, code, nested, req
from .helpers import topic_name as unique_topic
from .replica_check import assert_acknowledged_present, replica_batches, replica_dirs
from .replication_support import BackgroundProducer, converged, frozen, isr, leader

pytestmark = pytest.mark.slow

IN_FLIGHT = 5  # librdkafka's max.in.flight with enable.idempotence
FILLER_PARTITIONS = 300


def reassign(
    cluster: Cluster, topic: str, targets: dict[int, list[int]], wait: bool = True
) -> None:
    """AlterPartitionReassignments; with ``wait``, return once it is done and every
    target replica is in the ISR."""
    with RawClient(cluster.broker(cluster.controller_id()).bootstrap) as raw:
        response = raw.request(req(
            45, 0,
            topics=(nested(45, 0, "ReassignableTopic", name=topic, partitions=tuple(
                nested(45, 0, "ReassignablePartition", partition_index=p,
                       replicas=tuple(replicas))
                for p, replicas in targets.items())),),
        ))
    assert code(response.error_code) == errors.NONE, response
    for t in response.responses:
        for p in t.partitions:
            assert code(p.error_code) == errors.NONE, p
    if wait:
        reassigned(cluster, topic, targets)


def reassigned(cluster: Cluster, topic: str, targets: dict[int, list[int]]) -> None:
    for p, replicas in targets.items():
        wait_until(lambda p=p, r=replicas: cluster.assignment(topic)[p] == r
                   and sorted(isr(cluster, topic, p)) == sorted(r),
                   f"{topic}-{p} reassigned to {replicas}", timeout=60)


class PipelinedProducer:
    """Produce v9 (acks=all) of one-record idempotent batches to one partition of one
    broker over one connection, IN_FLIGHT requests outstanding at all times, as an
    idempotent client pipelines them; each answer's error code is kept by sequence. The
    first error stops it (the answers to what is in flight are still read)."""

    def __init__(self, bootstrap: str, topic: str, pid: int, epoch: int) -> None:
        self.raw = RawClient(bootstrap)
        self.topic = topic
        self.pid = pid
        self.epoch = epoch
        self.answers: list[tuple[int, int]] = []  # (sequence, error code)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _request(self, sequence: int) -> Any:
        record = Record(int(time.time() * 1000), None, f"v-{sequence:06d}".encode(), ())
        batch = build_batch([record], producer_id=self.pid, producer_epoch=self.epoch,
                            base_sequence=sequence)
        return produce.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(produce.TopicProduceData(name=self.topic, partition_data=(
                produce.PartitionProduceData(index=0, records=batch),)),),
        )

    def _run(self) -> None:
        outstanding: deque[tuple[int, int]] = deque()  # (sequence, correlation id)
        sequence = 0
        try:
            while not self.stop.is_set() or outstanding:
                while not self.stop.is_set() and len(outstanding) < IN_FLIGHT:
                    outstanding.append((sequence, self.raw.send(self._request(sequence))))
                    sequence += 1
                sent, correlation = outstanding.popleft()
                response = self.raw.receive(produce.ProduceRequest, correlation)
                (part,) = response.responses[0].partition_responses
                self.answers.append((sent, code(part.error_code)))
                if code(part.error_code) != errors.NONE:
                    self.stop.set()  # what follows a refusal is out of order: enough seen
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc
        finally:
            self.raw.close()

    def finish(self) -> list[tuple[int, int]]:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.error is None, repr(self.error)
        return self.answers


def init_producer(bootstrap: str) -> tuple[int, int]:
    with RawClient(bootstrap) as raw:
        response = raw.request(init_producer_id.request.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
    assert code(response.error_code) == errors.NONE, response
    return int(response.producer_id), int(response.producer_epoch)


def busy_storing(cluster: Cluster, brokers: list[int], name: str) -> None:
    """Give each broker FILLER_PARTITIONS partitions of a new topic to store, and return
    once each has begun: while a broker stores them, the roles of its other partitions
    follow the view's changes in one debounced pass (chronik.cluster.node), so that a
    change waits tens of milliseconds before its replica manager takes it up."""
    from confluent_kafka.admin import NewTopic

    cluster.admin(brokers[0]).create_topics([NewTopic(
        name, num_partitions=FILLER_PARTITIONS * len(brokers),
        replica_assignment=[[b] for b in brokers] * FILLER_PARTITIONS)])[name].result(60)
    for i, b in enumerate(brokers):
        wait_until(lambda i=i, b=b: cluster.partition_dir(b, name, i).exists(),
                   f"broker {b} storing {name}", timeout=60)


def test_a_leader_whose_epoch_goes_up_takes_every_pipelined_write(cluster_factory) -> None:
    """Broker 1 leads throughout while four reassignments (a follower removed, then
    added back, twice) each raise the leader epoch, each while broker 1 is busy storing
    a large topic, so that it takes the new epoch up only a while after its view has
    it: every one of the pipelined writes is answered without error (none refused for
    that while, none out of sequence after it) and stored once, in order."""
    cluster = cluster_factory(3)
    topic = unique_topic("epochs")
    from confluent_kafka.admin import NewTopic

    cluster.admin(1).create_topics([NewTopic(
        topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
        config={"min.insync.replicas": "2"})])[topic].result(60)
    cluster.wait_topic(topic, 1)
    wait_until(lambda: sorted(isr(cluster, topic, 0)) == [1, 2, 3], "the ISR full")
    pid, epoch = init_producer(cluster.broker(1).bootstrap)
    sender = PipelinedProducer(cluster.broker(1).bootstrap, topic, pid, epoch)
    sender.thread.start()
    epochs = [cluster.partition_state(topic, 0)["leader_epoch"]]

    def more(n: int = 20) -> None:
        start = len(sender.answers)
        wait_until(lambda: len(sender.answers) >= start + n or not sender.thread.is_alive(),
                   "writes answered")

    try:
        for i, replicas in enumerate(([1, 2], [1, 2, 3], [1, 2], [1, 2, 3])):
            more()
            if not sender.thread.is_alive():
                break  # refused: the answers say what
            busy_storing(cluster, [1], f"{topic}-filler-{i}")
            reassign(cluster, topic, {0: replicas})
            # The assignment and the ISR can read as done a moment before the partition's
            # state carries the raised epoch.
            before = epochs[-1]
            wait_until(lambda b=before: cluster.partition_state(topic, 0)["leader_epoch"] > b,
                       "the leader epoch raised")
            epochs.append(cluster.partition_state(topic, 0)["leader_epoch"])
        more()
    finally:
        answers = sender.finish()
    refused = [(seq, c) for seq, c in answers if c != errors.NONE]
    assert not refused, (
        f"{len(refused)} of {len(answers)} writes refused (sequence, error): {refused[:10]}")
    assert leader(cluster, topic, 0) == 1
    assert epochs == sorted(set(epochs)) and len(epochs) == 5, f"leader epochs {epochs}"
    replicas = converged(cluster, topic, 1)[0]
    expected = [f"v-{seq:06d}".encode() for seq, _ in answers]
    for broker_id, records in replicas.items():
        assert [r.value for r in records] == expected, f"broker {broker_id}'s replica"


def producer_values(directory: Any) -> list[tuple[int, int, bytes | None]]:
    """(producer id, producer epoch, value) of every record of a replica."""
    out = []
    for header, data in replica_batches(directory):
        if header.is_control:
            continue
        out += [(header.producer_id, header.producer_epoch, r.value) for r in iter_records(data)]
    return out


def test_idempotent_producer_through_epoch_changes_stores_each_record_once(
    cluster_factory,
) -> None:
    """confluent-kafka's idempotent producer (acks=all, five requests in flight, small
    linger, a one-second request timeout) writes to two kinds of partitions. Those led by
    broker A have a follower that is frozen for a few seconds at a time: their batches
    time out unacknowledged though written, and are retried, as librdkafka retries a
    batch it does not know to be written. Those led by broker B meanwhile have their
    leader epoch raised under the same leader (a reassignment removes their follower),
    while B is busy storing a new topic. librdkafka bumping its epoch then would send
    the timed-out batches again under the new epoch.
    Every acknowledged record is on every replica once, at its acknowledged offset, no
    replica holds two records of the same producer with the same value, and the producer
    never started a new epoch."""
    cluster = cluster_factory(3)
    topic = unique_topic("epochs")
    from confluent_kafka.admin import NewTopic

    controller_id = cluster.controller_id()
    still = next(x for x in (3, 2, 1) if x != controller_id)
    a, b = (x for x in (1, 2, 3) if x != still)
    rounds = 3
    timing_out = [[a, b, still], [a, still, b]]
    bumped = [[b, a]] * (2 * rounds)  # two partitions' epochs raised each round
    layout = timing_out + bumped
    partitions = len(layout)
    cluster.admin(a).create_topics([NewTopic(
        topic, num_partitions=partitions, replica_assignment=layout)])[topic].result(60)
    cluster.wait_topic(topic, partitions)
    for p, replicas in enumerate(layout):
        wait_until(lambda p=p, r=replicas: len(isr(cluster, topic, p)) == len(r),
                   f"{topic}-{p}'s ISR full")
    producer = BackgroundProducer(cluster.bootstrap, topic, max_rate=1500, **{
        "linger.ms": 2, "max.in.flight.requests.per.connection": IN_FLIGHT,
        "request.timeout.ms": 1000})
    producer.start()
    try:
        def more(n: int = 100) -> None:
            start = producer.acked_count
            wait_until(lambda: producer.acked_count >= start + n or producer.fatal,
                       f"{n} more records acknowledged", timeout=60)

        more()
        for i in range(rounds):
            first = len(timing_out) + 2 * i
            with frozen(cluster, still):
                time.sleep(1.5)  # A's requests time out, and are retried
                busy_storing(cluster, [b], f"{topic}-filler-{i}")
                # Their follower leaves two partitions led by B: a new epoch, same leader.
                reassign(cluster, topic, {first: [b], first + 1: [b]})
                time.sleep(1)
            more()
        acked = producer.stop()
    finally:
        producer.abandon()
    assert not producer.failed, producer.failed[:5]
    replicas = converged(cluster, topic, partitions)
    assert_acknowledged_present(acked, replicas)
    for p in range(partitions):
        assert leader(cluster, topic, p) == layout[p][0], f"{topic}-{p}'s leader"
        for broker_id, directory in replica_dirs(cluster, topic, p).items():
            stored = producer_values(directory)
            twice = [k for k, n in Counter((pid, v) for pid, _, v in stored).items() if n > 1]
            where = f"{topic}-{p} on broker {broker_id}"
            assert not twice, (
                f"{len(twice)} (producer id, value) pairs twice in {where}: {twice[:5]}")
            epochs = Counter(epoch for _, epoch, _ in stored)
            assert set(epochs) == {0}, f"producer epochs in {where}: {dict(epochs)}"
