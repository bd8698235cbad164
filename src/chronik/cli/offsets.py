"""`chronik offsets TOPIC`: earliest and latest offset of every partition."""

from __future__ import annotations

import argparse

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from chronik.cli.args import add_bootstrap
from chronik.cli.clients import Cluster
from chronik.cli.table import print_table
from chronik.cli.timestamps import parse_datetime_ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topics", metavar="TOPIC", nargs="+")
    parser.add_argument(
        "--time",
        metavar="ISO-DATETIME|MS",
        help="also show the first offset whose timestamp is at or after this time",
    )
    add_bootstrap(parser)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    at_ms = parse_datetime_ms(args.time) if args.time else None
    partitions = [
        TopicPartition(topic, p) for topic in args.topics for p in cluster.partitions(topic)
    ]
    marks = cluster.watermarks(partitions)
    at = cluster.list_offsets(partitions, OffsetSpec.for_timestamp(at_ms)) if at_ms else {}
    headers = ["TOPIC", "PARTITION", "EARLIEST", "LATEST", "RECORDS"]
    if at_ms is not None:
        headers.append("AT-TIME")
    rows = []
    for tp in partitions:
        low, high = marks[(tp.topic, tp.partition)]
        row: list[object] = [tp.topic, tp.partition, low, high, high - low]
        if at_ms is not None:
            found = at[(tp.topic, tp.partition)]
            row.append(high if found < 0 else found)
        rows.append(row)
    print_table(headers, rows)
    return 0
