"""`chronik topics create|list|describe|alter|delete`: topic administration."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    PartitionMetadata,
    TopicMetadata,
)

from chronik.cli.args import add_bootstrap, key_value, positive_int
from chronik.cli.clients import Cluster, wait
from chronik.cli.errors import CliError, describe_kafka_error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True

    create = sub.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--partitions", type=positive_int, help="number of partitions (default: broker's)"
    )
    create.add_argument(
        "--replication-factor", type=positive_int, help="replicas per partition (default: 1)"
    )
    create.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config, e.g. cleanup.policy=compact (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )

    listing = sub.add_parser("list", help="list topic names")
    listing.add_argument(
        "--include-internal", action="store_true", help="also list topics starting with '__'"
    )

    describe = sub.add_parser("describe", help="partitions, leaders and configs")
    describe.add_argument("name", metavar="NAME", nargs="?", help="default: every topic")
    describe.add_argument(
        "--include-internal", action="store_true", help="with no NAME, include '__' topics"
    )
    # Kafka's kafka-topics takes one partition filter at a time.
    only = describe.add_mutually_exclusive_group()
    only.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a live leader",
    )
    only.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica list",
    )

    alter = sub.add_parser("alter", help="change configs or add partitions")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="return a topic config to its default (repeatable)",
    )
    alter.add_argument("--partitions", type=positive_int, help="raise the partition count to N")

    delete = sub.add_parser("delete", help="delete topics and their data")
    delete.add_argument("names", metavar="NAME", nargs="+")
    delete.add_argument("--if-exists", action="store_true", help="succeed if a topic is absent")

    for child in (create, listing, describe, alter, delete):
        add_bootstrap(child)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    return ACTIONS[args.action](cluster, args)


def create(cluster: Cluster, args: argparse.Namespace) -> int:
    existing = cluster.metadata().topics
    if args.name in existing:
        if args.if_not_exists:
            return 0
        raise CliError(f"topic '{args.name}' already exists")
    topic = NewTopic(
        args.name,
        num_partitions=args.partitions or -1,
        replication_factor=args.replication_factor or -1,
        config=dict(args.config),
    )
    futures = cluster.admin.create_topics([topic], request_timeout=30.0)
    wait(futures[args.name], f"cannot create topic '{args.name}'")
    print(f"Created topic {args.name}.")
    return 0


def list_topics(cluster: Cluster, args: argparse.Namespace) -> int:
    for name in sorted(cluster.metadata().topics):
        if args.include_internal or not name.startswith("__"):
            print(name)
    return 0


def describe(cluster: Cluster, args: argparse.Namespace) -> int:
    if args.name:
        topics = [cluster.topic(args.name)]
    else:
        every = cluster.metadata().topics.values()
        topics = sorted(
            (t for t in every if args.include_internal or not t.topic.startswith("__")),
            key=lambda t: t.topic,
        )
    configs = topic_configs(cluster, [t.topic for t in topics])
    only = partition_filter(args)
    moving = reassignments(args, {t.topic for t in topics})
    for topic in topics:
        print_topic(topic, configs.get(topic.topic), only, moving)
    return 0


def reassignments(args: argparse.Namespace, names: set[str]) -> dict[tuple[str, int], Any]:
    """The partitions of ``names`` being reassigned (ListPartitionReassignments), as
    kafka-topics --describe shows them; none from a cluster that does not serve it or
    refuses to list them."""
    from chronik.cli.reassignments import LIST, ClusterAdmin

    admin = ClusterAdmin(args)
    try:
        if not names or not admin.serves(LIST[0]):
            return {}
        return {tp: r for tp, r in admin.ongoing().items() if tp[0] in names}
    except CliError:
        return {}


def unavailable(p: PartitionMetadata) -> bool:
    return p.leader < 0


def under_replicated(p: PartitionMetadata) -> bool:
    return len(p.isrs) < len(p.replicas)


def partition_filter(args: argparse.Namespace) -> Callable[[PartitionMetadata], bool] | None:
    """The partitions kafka-topics --describe would show with the filter given, if any."""
    if args.unavailable_partitions:
        return unavailable
    if args.under_replicated_partitions:
        return under_replicated
    return None


def print_topic(
    topic: TopicMetadata,
    configs: dict[str, str] | None,
    only: Callable[[PartitionMetadata], bool] | None = None,
    moving: dict[tuple[str, int], Any] | None = None,
) -> None:
    partitions = [topic.partitions[p] for p in sorted(topic.partitions)]
    if only is not None:
        # Like kafka-topics with a partition filter: only those partitions, no header.
        for p in partitions:
            if only(p):
                print_partition(topic.topic, p, (moving or {}).get((topic.topic, p.id)))
        return
    replication = len(partitions[0].replicas) if partitions else 0
    if configs is None:
        shown = "(unavailable)"
    else:
        shown = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    print(
        f"Topic: {topic.topic}\tPartitionCount: {len(partitions)}\t"
        f"ReplicationFactor: {replication}\tConfigs: {shown}"
    )
    for p in partitions:
        print_partition(topic.topic, p, (moving or {}).get((topic.topic, p.id)))


def print_partition(topic: str, p: PartitionMetadata, moving: Any = None) -> None:
    # Kafka's kafka-topics prints "Leader: none" for a partition whose replicas are all down.
    leader = str(p.leader) if p.leader >= 0 else "none"
    replicas = ",".join(map(str, p.replicas))
    isrs = ",".join(map(str, p.isrs))
    line = (
        f"\tTopic: {topic}\tPartition: {p.id}\tLeader: {leader}\t"
        f"Replicas: {replicas}\tIsr: {isrs}"
    )
    if moving is not None:
        # As kafka-topics: a partition being reassigned shows what it adds and removes.
        line += (f"\tAdding Replicas: {','.join(map(str, moving.adding))}"
                 f"\tRemoving Replicas: {','.join(map(str, moving.removing))}")
    if p.error is not None:
        line += f"\tError: {describe_kafka_error(p.error)}"
    print(line)


def topic_configs(cluster: Cluster, names: list[str]) -> dict[str, dict[str, str]]:
    """Configs set on each topic (not broker defaults); a topic is absent if unsupported."""
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    futures = cluster.admin.describe_configs(resources, request_timeout=30.0)
    result: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        try:
            entries: dict[str, ConfigEntry] = future.result(timeout=30.0)
        except Exception:
            # Some Kafka-compatible brokers lack DescribeConfigs; describe the rest anyway.
            continue
        result[resource.name] = {
            name: entry.value or ""
            for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            or (not entry.is_default and entry.source == ConfigSource.UNKNOWN_CONFIG.value)
        }
    return result


def alter(cluster: Cluster, args: argparse.Namespace) -> int:
    if not (args.config or args.delete_config or args.partitions):
        raise CliError("nothing to alter: give --config, --delete-config or --partitions")
    topic = cluster.topic(args.name)
    if args.config or args.delete_config:
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in args.config
        ] + [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in args.delete_config
        ]
        resource = ConfigResource(ConfigResource.Type.TOPIC, args.name, incremental_configs=entries)
        futures = cluster.admin.incremental_alter_configs([resource], request_timeout=30.0)
        for future in futures.values():
            wait(future, f"cannot alter configs of topic '{args.name}'")
        print(f"Updated configs of topic {args.name}.")
    if args.partitions:
        current = len(topic.partitions)
        if args.partitions < current:
            raise CliError(f"topic '{args.name}' has {current} partitions; the count can only grow")
        if args.partitions > current:
            futures = cluster.admin.create_partitions(
                [NewPartitions(args.name, args.partitions)], request_timeout=30.0
            )
            wait(futures[args.name], f"cannot add partitions to topic '{args.name}'")
            print(f"Topic {args.name} now has {args.partitions} partitions.")
    return 0


def delete(cluster: Cluster, args: argparse.Namespace) -> int:
    existing = cluster.metadata().topics
    missing = [n for n in args.names if n not in existing]
    if missing and not args.if_exists:
        raise CliError(f"topic '{missing[0]}' does not exist")
    names = [n for n in args.names if n in existing]
    if not names:
        return 0
    futures = cluster.admin.delete_topics(names, request_timeout=30.0)
    for name in names:
        wait(futures[name], f"cannot delete topic '{name}'")
        print(f"Deleted topic {name}.")
    return 0


ACTIONS = {
    "create": create,
    "list": list_topics,
    "describe": describe,
    "alter": alter,
    "delete": delete,
}
