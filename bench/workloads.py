"""Produce, consume and latency workloads, measured with confluent-kafka (librdkafka).

Every workload runs identically against each broker. Throughput counts only
delivered records and includes the final flush; the client is the same
single Python process for both brokers.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MIB = 1024 * 1024  # kafka-producer-perf-test's "MB"
CHUNK = 10_000  # produce() calls between polls and clock reads


class Meter(Protocol):
    """Brackets the measured part of a workload (the bench samples broker CPU with it)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class LoadProbe(Protocol):
    """A latency probe running beside a produce load (see latency_probe.py)."""

    def go(self) -> None: ...
    def stop(self) -> None: ...


class NoMeter:
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def producer_config(bootstrap: str, acks: str, **overrides: object) -> dict[str, object]:
    """kafka-producer-perf-test's defaults plus batching: linger 5 ms, ~1 MB batches."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "compression.type": "none",
        "enable.idempotence": False,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "message.timeout.ms": 120_000,
    }
    config.update(overrides)
    return config


def consumer_config(bootstrap: str) -> dict[str, object]:
    # librdkafka's defaults pause fetching for 1 s whenever 100k messages are
    # queued, which caps a fast consumer far below what either broker serves.
    # Fetch sizes stay at the client's defaults (1 MB per partition, 50 MB per fetch).
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "chronik-bench",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 262_144,
        "fetch.queue.backoff.ms": 5,
    }


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> dict[str, int]:
    """Create the topic, wait until every partition has a leader; partitions led per
    broker id."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(
        name, num_partitions=partitions, replication_factor=replication_factor,
        config=config or {},
    )
    futures = admin.create_topics([new_topic])
    futures[name].result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            leads: dict[str, int] = {}
            for p in topic.partitions.values():
                leads[str(p.leader)] = leads.get(str(p.leader), 0) + 1
            return leads
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} has no leaders after {timeout_s}s")


def delete_topics(bootstrap: str, names: list[str], timeout_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names, operation_timeout=timeout_s).values():
        with contextlib.suppress(Exception):  # a topic a failed step never created
            future.result(timeout=timeout_s)


class _Rate:
    """records/s and MB/s of a result dataclass with `records` and `seconds`."""

    records: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def as_dict(self, record_size: int) -> dict[str, object]:
        return {
            **asdict(self),
            "records_per_s": self.records_per_s,
            "mb_per_s": self.records_per_s * record_size / MIB,
        }


@dataclass
class ProduceResult(_Rate):
    records: int
    seconds: float
    failed: int
    warmup_records: int


def _produce_flat_out(
    producer: Producer, topic: str, value: bytes, limit: int, seconds: float
) -> int:
    """Queue records as fast as librdkafka accepts them; returns how many were queued."""
    produce = producer.produce
    poll = producer.poll
    queued = 0
    deadline = time.perf_counter() + seconds
    while queued < limit:
        try:
            for _ in range(min(CHUNK, limit - queued)):
                produce(topic, value)
                queued += 1
        except BufferError:
            poll(0.005)
        poll(0)
        if time.perf_counter() >= deadline:
            break
    return queued


def produce_throughput(
    bootstrap: str,
    topic: str,
    *,
    acks: str,
    record_size: int,
    seconds: float,
    max_records: int,
    warmup_records: int,
    batching: dict[str, object] | None = None,
    meter: Meter | None = None,
    probe: LoadProbe | None = None,
) -> ProduceResult:
    """Produce flat out for `seconds` (or `max_records`), then flush.

    `batching` overrides the producer's batching settings (batch.size, linger.ms).
    `probe` (already started and warmed up) is released when the load starts and
    stopped when it ends, to time single records through the loaded broker.
    """
    meter = meter or NoMeter()
    failed = 0

    def on_failure(err: object, msg: object) -> None:
        nonlocal failed
        failed += 1

    # Only failures are reported, so success costs no Python call per record;
    # delivered = queued - failed once flush() has drained the queue.
    producer = Producer(
        producer_config(
            bootstrap,
            acks,
            **{"delivery.report.only.error": True, "on_delivery": on_failure, **(batching or {})},
        )
    )
    value = b"x" * record_size
    warm = _produce_flat_out(producer, topic, value, warmup_records, seconds=60)
    if producer.flush(60) != 0:
        raise TimeoutError("warm-up records not delivered within 60 s")
    warm -= failed
    failed = 0

    meter.start()
    if probe is not None:
        probe.go()
    start = time.perf_counter()
    queued = _produce_flat_out(producer, topic, value, max_records, seconds)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    meter.stop()
    if probe is not None:
        probe.stop()
    if left:
        raise TimeoutError(f"{left} records still undelivered 120 s after the run")
    return ProduceResult(queued - failed, elapsed, failed, warm)


@dataclass
class ConsumeResult(_Rate):
    records: int
    seconds: float
    total_read: int


def consume_throughput(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout_s: float = 120.0,
    meter: Meter | None = None,
) -> ConsumeResult:
    """Read the whole topic from the beginning (assigned partitions, no group).

    The clock starts when the first records arrive, so connection setup and the
    initial offset lookup are not counted; the records of that first delivery
    are excluded from the rate as well.
    """
    meter = meter or NoMeter()
    consumer = Consumer(consumer_config(bootstrap))
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        total = 0
        first_batch = 0
        started = 0.0
        deadline = time.monotonic() + timeout_s
        while total < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {total} of {expected} records in {timeout_s}s")
            messages = consumer.consume(CHUNK, 0.5)
            if not messages:
                continue
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
            total += len(messages)
            if not started:
                meter.start()
                started = time.perf_counter()
                first_batch = len(messages)
        elapsed = time.perf_counter() - started
        meter.stop()
        return ConsumeResult(total - first_batch, elapsed, total)
    finally:
        consumer.close()


@dataclass
class LatencyResult:
    rate: int
    samples: int
    failed: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    warmup_delivered: int = 0

    def as_dict(self, record_size: int) -> dict[str, object]:
        return asdict(self)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


def produce_latency(
    bootstrap: str,
    topic: str,
    *,
    acks: str,
    record_size: int,
    rate: int,
    seconds: float,
    warmup_records: int,
    meter: Meter | None = None,
    stop: Callable[[], bool] | None = None,
) -> LatencyResult:
    """Per-record delivery latency (produce() call to delivery report) at a fixed rate.

    linger.ms is 0 here so the figure is the broker's round trip, not the
    client's batching delay. The client waits for delivery reports in poll()
    between sends, so a report is timed as soon as librdkafka has it. `stop`,
    checked before each send, ends the run early.
    """
    meter = meter or NoMeter()
    latencies: list[float] = []
    failed = 0

    def timed(sent: float):
        def report(err: object, msg: object) -> None:
            nonlocal failed
            if err is not None:
                failed += 1
            else:
                latencies.append(time.perf_counter() - sent)

        return report

    warm_delivered = 0

    def warmed(err: object, msg: object) -> None:
        nonlocal warm_delivered
        warm_delivered += err is None

    producer = Producer(producer_config(bootstrap, acks, **{"linger.ms": 0}))
    value = b"x" * record_size
    for _ in range(warmup_records):
        producer.produce(topic, value, on_delivery=warmed)
        producer.poll(0)
    if producer.flush(60):
        raise TimeoutError("latency warm-up records not delivered within 60 s")

    meter.start()
    interval = 1.0 / rate
    total = int(rate * seconds)
    next_send = time.perf_counter()
    for _ in range(total):
        while (wait := next_send - time.perf_counter()) > 0:
            producer.poll(wait)
        if stop is not None and stop():
            break
        producer.produce(topic, value, on_delivery=timed(time.perf_counter()))
        producer.poll(0)
        next_send += interval
    if producer.flush(60):
        raise TimeoutError("latency records not delivered within 60 s")
    meter.stop()
    ordered = sorted(latencies)
    return LatencyResult(
        rate=rate,
        samples=len(ordered),
        failed=failed,
        p50_ms=_percentile(ordered, 0.50) * 1000,
        p99_ms=_percentile(ordered, 0.99) * 1000,
        max_ms=(ordered[-1] if ordered else 0.0) * 1000,
        warmup_delivered=warm_delivered,
    )
