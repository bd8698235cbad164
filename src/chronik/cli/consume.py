"""`chronik consume TOPIC`: the console consumer.

Without --group it reads by assignment (every partition, or --partition) and
commits nothing, so it leaves no trace on the broker; with --group it joins the
group, resumes from the group's committed offsets and commits what it printed.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from chronik.cli.args import add_bootstrap, non_negative_int, positive_float, positive_int, unescape
from chronik.cli.clients import Cluster
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.record_format import JsonFormat, TextFormat
from chronik.cli.signals import signals_held, stop_on_sigterm

BATCH = 500
# How long --timeout waits, on top, for a group to hand out partitions.
JOIN_GRACE = 30.0
FATAL_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError._AUTO_OFFSET_RESET,
    KafkaError.INVALID_GROUP_ID,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest record (with --group: when the group has no offset yet)",
    )
    parser.add_argument("--group", metavar="G", help="consume as a member of group G")
    parser.add_argument("--partition", type=non_negative_int, metavar="P")
    parser.add_argument(
        "--offset", metavar="N|earliest|latest", help="with --partition: where to start"
    )
    parser.add_argument("--max-messages", type=positive_int, metavar="N")
    parser.add_argument(
        "--timeout",
        type=positive_float,
        metavar="SECONDS",
        help="exit when no record arrives for this long",
    )
    for field in ("key", "offset", "partition", "timestamp", "headers"):
        parser.add_argument(f"--print-{field}", action="store_true")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="between key and value with --print-key (default tab)",
    )
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    start = parse_offset(args)
    cluster = Cluster.from_args(args)
    partitions = cluster.partitions(args.topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(
                f"topic '{args.topic}' has no partition {args.partition} "
                f"(partitions 0..{len(partitions) - 1})"
            )
        if start is not None and start >= 0:
            check_in_range(cluster, args.topic, args.partition, start)

    consumer = Consumer(
        cluster.config(
            **{
                "group.id": args.group or "chronik-console-consumer",
                "enable.auto.commit": bool(args.group),
                "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                "session.timeout.ms": 10000,
                "enable.partition.eof": False,
            }
        )
    )
    formatter = (
        JsonFormat()
        if args.format == "json"
        else TextFormat(
            key=args.print_key,
            offset=args.print_offset,
            partition=args.print_partition,
            timestamp=args.print_timestamp,
            headers=args.print_headers,
            key_separator=unescape(args.key_separator).encode(),
        )
    )
    printer = Printer(consumer, formatter, joining=bool(args.group and args.partition is None))
    initial = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    if args.partition is not None:
        if start is None:
            start = OFFSET_STORED if args.group else initial
        consumer.assign([TopicPartition(args.topic, args.partition, start)])
    elif args.group:
        consumer.subscribe([args.topic], on_assign=printer.on_assign)
    else:
        consumer.assign([TopicPartition(args.topic, p, initial) for p in partitions])

    stop_on_sigterm()
    try:
        printer.run(args.max_messages, args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            if args.group:
                commit_positions(consumer, args.from_beginning)
            consumer.close()
        print(f"Processed a total of {printer.count} messages", file=sys.stderr)
    return 0


def parse_offset(args: argparse.Namespace) -> int | None:
    """--offset as an absolute offset, OFFSET_BEGINNING/END, or None when not given."""
    if args.offset is None:
        return None
    if args.partition is None:
        raise CliError("--offset needs --partition")
    named = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}
    if args.offset in named:
        return named[args.offset]
    try:
        offset = int(args.offset)
    except ValueError:
        raise CliError(
            f"bad offset {args.offset!r}: expected a number, 'earliest' or 'latest'"
        ) from None
    if offset < 0:
        raise CliError(f"bad offset {offset}: offsets start at 0")
    return offset


def check_in_range(cluster: Cluster, topic: str, partition: int, offset: int) -> None:
    low, high = cluster.watermarks([TopicPartition(topic, partition)])[(topic, partition)]
    if not low <= offset <= high:
        raise CliError(
            f"offset {offset} is out of range for partition {partition} of '{topic}' "
            f"(earliest {low}, latest {high})"
        )


def commit_positions(consumer: Consumer, from_beginning: bool) -> None:
    """Commit where every assigned partition stands, whether a record came from it or not.

    librdkafka commits only partitions a record was returned from. Kafka's own
    console consumer commits each partition's position, so a partition that gave
    nothing to a `--from-beginning` run is not skipped to its end on the next one.
    """
    try:
        assigned = consumer.assignment()
        if not assigned:
            return
        committed = {
            (tp.topic, tp.partition): tp.offset for tp in consumer.committed(assigned, timeout=5)
        }
        offsets = []
        for tp in consumer.position(assigned):
            if tp.offset >= 0:
                offsets.append(tp)
            elif from_beginning and committed.get((tp.topic, tp.partition), -1) < 0:
                low, _ = consumer.get_watermark_offsets(tp, timeout=5)
                offsets.append(TopicPartition(tp.topic, tp.partition, low))
        if offsets:
            consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        print(
            f"chronik: warning: could not commit offsets: {describe_kafka_error(exc)}",
            file=sys.stderr,
        )


class Printer:
    """Writes records to stdout as they arrive; counts them for the closing line."""

    def __init__(
        self, consumer: Consumer, formatter: TextFormat | JsonFormat, joining: bool = False
    ) -> None:
        self.consumer = consumer
        self.formatter = formatter
        self.count = 0
        self.warned: set[int] = set()
        self.clock = time.monotonic()
        self.joining = joining

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Joining a group can take seconds; --timeout measures idleness after that.
        self.joining = False
        self.clock = time.monotonic()

    def run(self, max_messages: int | None, idle_timeout: float | None) -> None:
        out = sys.stdout.buffer
        self.clock = time.monotonic()
        while max_messages is None or self.count < max_messages:
            wanted = BATCH if max_messages is None else min(BATCH, max_messages - self.count)
            wait = 0.5
            if idle_timeout is not None:
                grace = JOIN_GRACE if self.joining else 0.0
                left = idle_timeout + grace - (time.monotonic() - self.clock)
                if left <= 0:
                    return
                wait = min(wait, left)
            messages = self.consumer.consume(num_messages=wanted, timeout=wait)
            # Written, counted and flushed with SIGINT/SIGTERM held: a stop right after
            # the output is seen (stdout may be unbuffered) must still count it.
            with signals_held():
                printed = 0
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        self.report(err)
                        continue
                    out.write(self.formatter.render(msg))
                    printed += 1
                if printed:
                    self.count += printed
                    self.clock = time.monotonic()
                    out.flush()

    def report(self, err: KafkaError) -> None:
        """Stop on errors that will not heal; warn once about ones that may."""
        if err.fatal() or err.code() in FATAL_CODES:
            raise CliError(describe_kafka_error(err))
        if err.code() not in self.warned:
            self.warned.add(err.code())
            print(f"chronik: warning: {describe_kafka_error(err)}", file=sys.stderr)
