"""A produce load from several producer processes at once, for the cluster bench.

One Python process drives librdkafka at about a million small records/s at most, and
one chronik broker keeps up with that; to find the ceiling of a broker's event loop the
load has to come from several processes. Each process runs its own confluent-kafka
producer with keyed records (so librdkafka's partitioner spreads them over every
partition, and so over every broker of a cluster), warms up, waits for the others, then
produces flat out for a fixed time and flushes. The aggregate rate is every delivered
record over the span from the first process's start to the last one's flush.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Producer

CHUNK = 2_000  # produce() calls between polls and clock reads


@dataclass(frozen=True)
class LoadSettings:
    producers: int
    acks: str
    record_size: int
    seconds: float
    warmup_records: int
    keys: int
    batch_size: int
    linger_ms: int


@dataclass
class WorkerResult:
    records: int
    failed: int
    started: float  # time.time() when the measured part began
    finished: float  # time.time() when its records were all delivered
    cpu_s: float  # the producer process's own CPU over the measured part


@dataclass
class LoadResult:
    records: int
    failed: int
    seconds: float
    client_cpu_s: float
    workers: list[WorkerResult]

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def as_dict(self, record_size: int) -> dict[str, object]:
        return {
            "records": self.records,
            "failed": self.failed,
            "seconds": self.seconds,
            "records_per_s": self.records_per_s,
            "mb_per_s": self.records_per_s * record_size / (1024 * 1024),
            "client_cores": self.client_cpu_s / self.seconds if self.seconds else 0.0,
            "per_producer_records": [w.records for w in self.workers],
        }


def producer_config(bootstrap: str, settings: LoadSettings) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": settings.acks,
        "linger.ms": settings.linger_ms,
        "batch.size": settings.batch_size,
        "compression.type": "none",
        "enable.idempotence": False,
        # A short queue: the run measures the steady rate, not how fast a backlog drains,
        # and four processes do not each hold hundreds of MB.
        "queue.buffering.max.messages": 100_000,
        "queue.buffering.max.kbytes": 32_768,
        "message.timeout.ms": 120_000,
        # Failures only: success costs no Python call per record.
        "delivery.report.only.error": True,
    }


def _produce_for(
    producer: Producer, topic: str, value: bytes, keys: list[bytes], until: float, limit: int
) -> int:
    # produce_batch() queues a list in one call: the Python cost per record is a list
    # slot, not a method call, so a process offers librdkafka several times more records.
    batch = [{"key": keys[i % len(keys)], "value": value} for i in range(CHUNK)]
    produce_batch = producer.produce_batch
    poll = producer.poll
    queued = 0
    while queued < limit:
        chunk = batch if limit - queued >= CHUNK else batch[: limit - queued]
        done = produce_batch(topic, chunk)
        queued += done
        if done < len(chunk):
            # The queue is full: the rest came back marked with '_error'. Clean the
            # reused dicts and wait until deliveries have made room for a whole chunk:
            # offering it again after each 5 ms poll refused most of it again, and the
            # marking and cleaning of thousands of refused records a second took the
            # CPU the brokers on the same cores needed, the more the slower they
            # acknowledged (acks=all, replication).
            for message in chunk:
                message.pop("_error", None)
            queued_now = len(producer)
            room = max(queued_now - CHUNK, queued_now // 2)  # large records: fewer queued
            while len(producer) > room and time.perf_counter() < until:
                poll(0.005)
        else:
            poll(0)
        if time.perf_counter() >= until:
            break
    return queued


def _worker(
    index: int,
    bootstrap: str,
    topic: str,
    settings: LoadSettings,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    try:
        failed = 0

        def on_failure(err: object, msg: object) -> None:
            nonlocal failed
            failed += 1

        producer = Producer({**producer_config(bootstrap, settings), "on_delivery": on_failure})
        value = b"x" * settings.record_size
        # Distinct keys per process, so every process spreads over every partition.
        keys = [f"p{index}-key-{k}".encode() for k in range(settings.keys)]
        _produce_for(
            producer, topic, value, keys, time.perf_counter() + 60, settings.warmup_records
        )
        if producer.flush(60):
            raise TimeoutError("warm-up records not delivered within 60 s")
        failed = 0
        ready.put(index)
        if not go.wait(120):
            raise TimeoutError("the other producers never started")
        started = time.time()
        cpu0 = time.process_time()
        queued = _produce_for(
            producer, topic, value, keys, time.perf_counter() + settings.seconds, 10**12
        )
        left = producer.flush(120)
        finished = time.time()
        cpu = time.process_time() - cpu0
        if left:
            raise TimeoutError(f"{left} records still undelivered 120 s after the run")
        results.put(asdict(WorkerResult(queued - failed, failed, started, finished, cpu)))
    except Exception as exc:
        ready.put(index)
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def run_load(bootstrap: str, topic: str, settings: LoadSettings, meter: Any = None) -> LoadResult:
    """Run `settings.producers` producer processes against `bootstrap`, all at once.

    `meter` (start/stop) brackets the measured part, after every process has warmed up.
    """
    # spawn, not fork: the parent may already run librdkafka threads.
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    go = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(i, bootstrap, topic, settings, ready, go, results),
            daemon=True,
        )
        for i in range(settings.producers)
    ]
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=120)
        if meter is not None:
            meter.start()
        go.set()
        collected = []
        for _ in procs:
            try:
                collected.append(results.get(timeout=settings.seconds + 300))
            except queue.Empty:
                raise TimeoutError("a producer process gave no result") from None
        if meter is not None:
            meter.stop()
    finally:
        go.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    errors = [c["error"] for c in collected if "error" in c]
    if errors:
        raise RuntimeError(f"producer failed: {errors[0]}")
    workers = [WorkerResult(**c) for c in collected]
    span = max(w.finished for w in workers) - min(w.started for w in workers)
    return LoadResult(
        records=sum(w.records for w in workers),
        failed=sum(w.failed for w in workers),
        seconds=span,
        client_cpu_s=sum(w.cpu_s for w in workers),
        workers=workers,
    )
