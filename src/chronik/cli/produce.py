"""`chronik produce TOPIC`: the console producer, one record per input line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import BinaryIO

from confluent_kafka import KafkaError, Message, Producer

from chronik.cli.args import add_bootstrap, key_value, non_negative_int, positive_float, unescape
from chronik.cli.clients import Cluster
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.signals import stop_on_sigterm

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--file", metavar="F", help="read lines from F instead of stdin")
    parser.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (e.g. ':' or '\\t')",
    )
    parser.add_argument(
        "--header",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add this header to every record (repeatable)",
    )
    parser.add_argument(
        "--acks",
        choices=("0", "1", "all", "-1"),
        default="all",
        help="acknowledgement the broker gives before a record counts as sent (default all)",
    )
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none")
    parser.add_argument(
        "--partition",
        type=non_negative_int,
        metavar="P",
        help="write every record to partition P (default: by key hash, or spread)",
    )
    parser.add_argument(
        "--delivery-timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="give up on a record not acknowledged within this time (default 30)",
    )
    add_bootstrap(parser)


class Delivery:
    """Counts acknowledgements; remembers the first failure to report it."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = err


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    partitions = cluster.partitions(args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise CliError(
            f"topic '{args.topic}' has no partition {args.partition} "
            f"(partitions 0..{len(partitions) - 1})"
        )
    producer = Producer(
        cluster.config(
            **{
                "acks": args.acks,
                "compression.type": args.compression,
                "linger.ms": 5,
                "message.timeout.ms": int(args.delivery_timeout * 1000),
            }
        )
    )
    delivery = Delivery()
    stop_on_sigterm()
    separator = unescape(args.key_separator).encode() if args.key_separator else None
    headers = [(k, v.encode()) for k, v in args.header] or None
    sent = 0
    bad_line: str | None = None
    source: BinaryIO = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    try:
        for number, line in enumerate(lines(source), start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    bad_line = f"line {number} has no key separator {args.key_separator!r}"
                    break
            send(producer, args.topic, key, value, headers, args.partition, delivery)
            sent += 1
            if delivery.first_error is not None:
                break
    except KeyboardInterrupt:
        pass
    finally:
        if args.file:
            source.close()
        remaining = producer.flush(args.delivery_timeout + 5)
    print(f"Produced a total of {delivery.delivered} records", file=sys.stderr)
    if delivery.first_error is not None:
        raise CliError(
            f"{sent - delivery.delivered} of {sent} records not delivered to "
            f"'{args.topic}': {describe_kafka_error(delivery.first_error)}"
        )
    if remaining:
        raise CliError(f"{remaining} records still unacknowledged when giving up")
    if bad_line is not None:
        raise CliError(bad_line)
    return 0


def lines(source: BinaryIO) -> Iterable[bytes]:
    """Lines without their terminator; a final line without one is still a record."""
    for line in source:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def send(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes,
    headers: list[tuple[str, bytes]] | None,
    partition: int | None,
    delivery: Delivery,
) -> None:
    extra = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value, key, headers=headers, on_delivery=delivery, **extra)
            break
        except BufferError:
            # The local queue is full: wait for acknowledgements to make room.
            producer.poll(0.1)
    producer.poll(0)
