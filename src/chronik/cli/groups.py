"""`chronik groups list|describe|reset-offsets|delete`: consumer group administration."""

from __future__ import annotations

import argparse
import sys

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConsumerGroupDescription, OffsetSpec

from chronik.cli.args import add_bootstrap
from chronik.cli.clients import OPERATION_TIMEOUT, Cluster, wait
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.table import print_table
from chronik.cli.timestamps import parse_datetime_ms

# Kafka only lets offsets be reset while nobody consumes (kafka-consumer-groups does the same).
INACTIVE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    listing = sub.add_parser("list", help="list groups and their state")

    describe = sub.add_parser("describe", help="members, committed offsets and lag")
    describe.add_argument("group", metavar="G")

    reset = sub.add_parser("reset-offsets", help="move an inactive group's committed offsets")
    reset.add_argument("group", metavar="G")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P...]",
        help="topic to reset, optionally only some partitions (repeatable)",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument("--to-datetime", metavar="ISO-DATETIME")
    reset.add_argument(
        "--execute", action="store_true", help="apply the plan (default: only print it)"
    )

    delete = sub.add_parser("delete", help="delete inactive groups and their offsets")
    delete.add_argument("groups", metavar="G", nargs="+")

    for child in (listing, describe, reset, delete):
        add_bootstrap(child)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    cluster.metadata()  # fail fast and clearly when no broker answers
    return ACTIONS[args.action](cluster, args)


def list_groups(cluster: Cluster, args: argparse.Namespace) -> int:
    result = wait(
        cluster.admin.list_consumer_groups(request_timeout=OPERATION_TIMEOUT),
        "cannot list groups",
    )
    for err in result.errors:
        print(f"chronik: warning: {describe_kafka_error(err)}", file=sys.stderr)
    rows = [
        (g.group_id, state_name(g.state)) for g in sorted(result.valid, key=lambda g: g.group_id)
    ]
    print_table(["GROUP", "STATE"], rows)
    return 0


def describe(cluster: Cluster, args: argparse.Namespace) -> int:
    group = describe_group(cluster, args.group)
    committed = committed_offsets(cluster, args.group)
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    for member in group.members:
        for tp in member.assignment.topic_partitions if member.assignment else ():
            owners[(tp.topic, tp.partition)] = (member.member_id, member.host, member.client_id)
    keys = sorted(set(committed) | set(owners))
    latest = cluster.list_offsets([TopicPartition(t, p) for t, p in keys], OffsetSpec.latest())
    members = len(group.members)
    print(
        f"Consumer group '{args.group}' is {state_name(group.state)} with "
        f"{members} member{'' if members == 1 else 's'}.",
        file=sys.stderr,
    )
    rows = []
    for key in keys:
        current = committed.get(key)
        end = latest.get(key, -1)
        lag = end - current if current is not None and end >= 0 else "-"
        member_id, host, client_id = owners.get(key, ("-", "-", "-"))
        rows.append(
            (
                args.group,
                key[0],
                key[1],
                "-" if current is None else current,
                end if end >= 0 else "-",
                lag,
                member_id,
                host,
                client_id,
            )
        )
    print_table(
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        rows,
    )
    return 0


def reset_offsets(cluster: Cluster, args: argparse.Namespace) -> int:
    group = describe_group(cluster, args.group, missing_ok=True)
    if group is not None and group.state not in INACTIVE:
        raise CliError(
            f"cannot reset offsets of group '{args.group}': it is "
            f"{state_name(group.state)} with {len(group.members)} active member(s); "
            "stop its consumers first"
        )
    partitions = reset_scope(cluster, args)
    earliest = cluster.list_offsets(partitions, OffsetSpec.earliest())
    latest = cluster.list_offsets(partitions, OffsetSpec.latest())
    if args.to_datetime is not None:
        at = cluster.list_offsets(
            partitions, OffsetSpec.for_timestamp(parse_datetime_ms(args.to_datetime))
        )
    plan: list[TopicPartition] = []
    for tp in partitions:
        key = (tp.topic, tp.partition)
        low, high = earliest[key], latest[key]
        if args.to_earliest:
            new = low
        elif args.to_latest:
            new = high
        elif args.to_offset is not None:
            # Like Kafka: an offset outside the log is clamped to its nearest end.
            new = min(max(args.to_offset, low), high)
        else:
            new = high if at[key] < 0 else at[key]
        plan.append(TopicPartition(tp.topic, tp.partition, new))
    print_table(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [(args.group, tp.topic, tp.partition, tp.offset) for tp in plan],
    )
    if not args.execute:
        print("Dry run: nothing changed. Add --execute to apply.", file=sys.stderr)
        return 0
    futures = cluster.admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(args.group, plan)], request_timeout=OPERATION_TIMEOUT
    )
    result = wait(futures[args.group], f"cannot reset offsets of group '{args.group}'")
    for tp in result.topic_partitions:
        if tp.error is not None:
            raise CliError(
                f"cannot reset offset of {tp.topic}-{tp.partition} for group "
                f"'{args.group}': {describe_kafka_error(tp.error)}"
            )
    print(f"Reset offsets of group {args.group}.", file=sys.stderr)
    return 0


def reset_scope(cluster: Cluster, args: argparse.Namespace) -> list[TopicPartition]:
    if args.all_topics:
        keys = sorted(committed_offsets(cluster, args.group))
        if not keys:
            raise CliError(f"group '{args.group}' has no committed offsets")
        return [TopicPartition(t, p) for t, p in keys]
    partitions: list[TopicPartition] = []
    for spec in args.topic:
        topic, _, chosen = spec.partition(":")
        existing = cluster.partitions(topic)
        if chosen:
            try:
                wanted = [int(p) for p in chosen.split(",")]
            except ValueError:
                raise CliError(f"bad --topic {spec!r}: expected TOPIC or TOPIC:0,1,...") from None
            unknown = [p for p in wanted if p not in existing]
            if unknown:
                raise CliError(f"topic '{topic}' has no partition {unknown[0]}")
        else:
            wanted = existing
        partitions.extend(TopicPartition(topic, p) for p in wanted)
    return partitions


def delete(cluster: Cluster, args: argparse.Namespace) -> int:
    futures = cluster.admin.delete_consumer_groups(args.groups, request_timeout=OPERATION_TIMEOUT)
    for group in args.groups:
        wait(futures[group], f"cannot delete group '{group}'")
        print(f"Deleted group {group}.")
    return 0


def describe_group(
    cluster: Cluster, group_id: str, missing_ok: bool = False
) -> ConsumerGroupDescription | None:
    futures = cluster.admin.describe_consumer_groups([group_id], request_timeout=OPERATION_TIMEOUT)
    group = wait(futures[group_id], f"cannot describe group '{group_id}'")
    if group.state == ConsumerGroupState.DEAD and not group.members:
        if missing_ok:
            return None
        raise CliError(f"consumer group '{group_id}' does not exist")
    return group


def committed_offsets(cluster: Cluster, group_id: str) -> dict[tuple[str, int], int]:
    futures = cluster.admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group_id)], request_timeout=OPERATION_TIMEOUT
    )
    result = wait(futures[group_id], f"cannot read offsets of group '{group_id}'")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions or ()
        if tp.error is None and tp.offset >= 0
    }


def state_name(state: ConsumerGroupState) -> str:
    names = {
        ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
        ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
        ConsumerGroupState.STABLE: "Stable",
        ConsumerGroupState.EMPTY: "Empty",
        ConsumerGroupState.DEAD: "Dead",
    }
    return names.get(state, "Unknown")


ACTIONS = {
    "list": list_groups,
    "describe": describe,
    "reset-offsets": reset_offsets,
    "delete": delete,
}
