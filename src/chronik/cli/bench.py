"""`chronik bench produce|consume`: throughput and latency against any Kafka broker.

Like kafka-producer-perf-test and kafka-consumer-perf-test: fixed-size records,
an optional throughput cap, and a summary of records/s, MB/s and (for produce)
the latency from produce() to the broker's acknowledgement.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from array import array
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import NewTopic

from chronik.cli.args import add_bootstrap, key_value, positive_int
from chronik.cli.clients import Cluster, wait
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.latency import summarize
from chronik.cli.produce import COMPRESSIONS
from chronik.cli.progress import Progress
from chronik.cli.signals import stop_on_sigterm

MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    produce = sub.add_parser("produce", help="producer throughput and acknowledgement latency")
    produce.add_argument("--topic", default="chronik-bench")
    produce.add_argument("--num-records", type=positive_int, default=100_000, metavar="N")
    produce.add_argument("--record-size", type=positive_int, default=100, metavar="BYTES")
    produce.add_argument(
        "--throughput",
        type=int,
        default=-1,
        metavar="RECORDS/S",
        help="cap the send rate (default -1: as fast as possible)",
    )
    produce.add_argument("--acks", choices=("0", "1", "all", "-1"), default="1")
    produce.add_argument("--compression", choices=COMPRESSIONS, default="none")
    produce.add_argument(
        "--partitions",
        type=positive_int,
        default=1,
        metavar="N",
        help="partitions of the topic when it has to be created (default 1)",
    )
    produce.add_argument(
        "--producer-property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer setting (repeatable)",
    )

    consume = sub.add_parser("consume", help="consumer throughput from the beginning of a topic")
    consume.add_argument("--topic", default="chronik-bench")
    consume.add_argument(
        "--num-records",
        type=positive_int,
        metavar="N",
        help="records to read (default: all the topic holds when the run starts)",
    )
    consume.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="give up when no record arrives for this long (default 10)",
    )
    consume.add_argument(
        "--consumer-property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer setting (repeatable)",
    )

    for child in (produce, consume):
        child.add_argument("--json", action="store_true", help="print the summary as JSON")
        add_bootstrap(child)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    stop_on_sigterm()
    if args.action == "produce":
        return bench_produce(cluster, args)
    return bench_consume(cluster, args)


class Acks:
    """Delivery callback: latency of every acknowledged record, first error kept."""

    def __init__(self) -> None:
        self.latencies = array("d")
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.latencies.append(msg.latency() or 0.0)
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = err


def ensure_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    existing = cluster.metadata().topics.get(topic)
    if existing is not None:
        if len(existing.partitions) != partitions:
            print(
                f"chronik: note: topic '{topic}' exists with {len(existing.partitions)} "
                "partitions; using it as it is",
                file=sys.stderr,
            )
        return
    futures = cluster.admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=-1)],
        request_timeout=30.0,
    )
    wait(futures[topic], f"cannot create topic '{topic}'")


def bench_produce(cluster: Cluster, args: argparse.Namespace) -> int:
    ensure_topic(cluster, args.topic, args.partitions)
    acks = Acks()
    conf = cluster.config(
        **{
            "acks": args.acks,
            "compression.type": args.compression,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "on_delivery": acks,
        }
    )
    conf.update(dict(args.producer_property))
    producer = Producer(conf)
    alphabet = string.ascii_uppercase.encode()
    payload = bytes(random.choice(alphabet) for _ in range(args.record_size))
    total, rate = args.num_records, args.throughput
    progress = Progress(total)
    produce, poll = producer.produce, producer.poll
    check_every = 1000 if rate <= 0 else max(1, min(1000, rate // 100))
    sent = 0
    started = time.perf_counter()
    try:
        while sent < total:
            try:
                produce(args.topic, payload)
            except BufferError:
                poll(0.01)
                continue
            sent += 1
            if sent % check_every == 0:
                poll(0)
                progress.update(len(acks.latencies))
                if acks.first_error is not None:
                    break
                if rate > 0:
                    ahead = sent / rate - (time.perf_counter() - started)
                    if ahead > 0:
                        time.sleep(ahead)
        while producer.flush(0.2):
            progress.update(len(acks.latencies))
    except KeyboardInterrupt:
        producer.flush(5)
    elapsed = time.perf_counter() - started
    progress.close()
    done = len(acks.latencies)
    summary: dict[str, Any] = {
        "records": done,
        "seconds": round(elapsed, 3),
        "records_per_sec": round(done / elapsed, 1),
        "mb_per_sec": round(done * args.record_size / MB / elapsed, 2),
        "latency_ms": {k: round(v, 2) for k, v in summarize(acks.latencies).items()},
    }
    if args.json:
        print(json.dumps(summary))
    else:
        lat = summary["latency_ms"]
        print(
            f"{done} records sent in {elapsed:.2f} s, {summary['records_per_sec']:,.1f} "
            f"records/s ({summary['mb_per_sec']:.2f} MB/s)"
        )
        if lat:
            print(
                f"latency ms: avg {lat['avg']:.2f}, p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}, "
                f"p99 {lat['p99']:.2f}, p99.9 {lat['p99.9']:.2f}, max {lat['max']:.2f}"
            )
    if acks.first_error is not None:
        raise CliError(
            f"{acks.failed} records not delivered: {describe_kafka_error(acks.first_error)}"
        )
    return 0


def bench_consume(cluster: Cluster, args: argparse.Namespace) -> int:
    partitions = [TopicPartition(args.topic, p) for p in cluster.partitions(args.topic)]
    marks = cluster.watermarks(partitions)
    total = args.num_records or sum(high - low for low, high in marks.values())
    if total == 0:
        raise CliError(f"topic '{args.topic}' is empty; run 'chronik bench produce' first")
    conf = cluster.config(
        **{
            "group.id": "chronik-bench-consumer",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * MB,
            "max.partition.fetch.bytes": 10 * MB,
        }
    )
    conf.update(dict(args.consumer_property))
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in partitions])
    progress = Progress(total)
    count = size = 0
    first_at: float | None = None
    started = last_seen = time.perf_counter()
    try:
        while count < total:
            if first_at is None:
                # A single poll returns as soon as one record is there: time to first record.
                first = consumer.poll(0.1)
                batch = [] if first is None else [first]
            else:
                batch = consumer.consume(num_messages=min(10_000, total - count), timeout=0.1)
            now = time.perf_counter()
            if not batch:
                if now - last_seen > args.timeout:
                    break
                continue
            last_seen = now
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise CliError(describe_kafka_error(err))
                    continue
                count += 1
                size += len(msg.value() or b"") + len(msg.key() or b"")
            if first_at is None:
                first_at = now - started
            progress.update(count)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    elapsed = last_seen - started
    progress.close()
    summary = {
        "records": count,
        "seconds": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1) if elapsed else 0.0,
        "mb_per_sec": round(size / MB / elapsed, 2) if elapsed else 0.0,
        "bytes": size,
        "first_record_ms": round(1000 * first_at, 1) if first_at is not None else None,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{count} records ({size / MB:.2f} MB) consumed in {elapsed:.2f} s, "
            f"{summary['records_per_sec']:,.1f} records/s ({summary['mb_per_sec']:.2f} MB/s), "
            f"first record after {summary['first_record_ms']} ms"
        )
    if count < total:
        raise CliError(f"only {count} of {total} records arrived (no record for {args.timeout:g}s)")
    return 0
