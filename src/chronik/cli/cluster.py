"""`chronik cluster describe`: the brokers of a cluster, its controller and who leads what;
`chronik cluster elect-leaders`: preferred or unclean leader election (kafka-leader-election);
`chronik cluster rebalance` and `chronik cluster decommission BROKER` (chronik.cli.rebalance):
replicas and leaders spread evenly, or moved off a broker.

Everything comes over the Kafka protocol from the one broker given: DescribeCluster for
the cluster id, the controller and each broker's rack, and Metadata for every partition's
leader. ZooKeeper is never asked, so the command works against any Kafka-compatible
cluster, and against a single chronik node (one broker, its own controller).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ClusterMetadata

from chronik.cli.args import add_bootstrap, non_negative_int
from chronik.cli.clients import OPERATION_TIMEOUT, Cluster, wait
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.table import print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    describe = sub.add_parser(
        "describe", help="brokers, the controller and the partitions each broker leads"
    )
    add_bootstrap(describe)
    elect = sub.add_parser(
        "elect-leaders",
        help="move leadership to each partition's preferred replica, or elect an unclean leader",
    )
    elect.add_argument("--topic", metavar="TOPIC", help="default: every partition of the cluster")
    elect.add_argument(
        "--partition",
        type=non_negative_int,
        metavar="P",
        help="only this partition of --topic (default: all of its partitions)",
    )
    elect.add_argument(
        "--type",
        choices=sorted(ELECTION_TYPES),
        default="preferred",
        help="preferred: the first replica of each partition's list, when it is in the ISR; "
        "unclean: any live replica of a partition without a leader (may lose records)",
    )
    add_bootstrap(elect)
    from chronik.cli.rebalance import add_plan_arguments

    rebalance = sub.add_parser(
        "rebalance",
        help="spread replicas and leaders evenly over the live brokers, moving little data",
    )
    rebalance.add_argument("--topic", action="append", metavar="TOPIC",
                           help="only the partitions of this topic (repeatable)")
    add_plan_arguments(rebalance)
    add_bootstrap(rebalance)
    decommission = sub.add_parser(
        "decommission", help="move every replica off a broker so it may be stopped"
    )
    decommission.add_argument("broker", type=non_negative_int, metavar="BROKER_ID")
    add_plan_arguments(decommission)
    add_bootstrap(decommission)


def run(args: argparse.Namespace) -> int:
    if args.action == "elect-leaders":
        return elect_leaders(args)
    if args.action in ("rebalance", "decommission"):
        from chronik.cli import rebalance

        return rebalance.rebalance(args) if args.action == "rebalance" else (
            rebalance.decommission(args)
        )
    cluster = Cluster.from_args(args)
    metadata = cluster.metadata()  # fails with one line when no broker answers
    print_view(view_of(cluster, metadata))
    return 0


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class Offline:
    topic: str
    partition: int
    replicas: tuple[int, ...]


@dataclass
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: list[Broker]
    leads: dict[int, int]
    partitions: int
    offline: list[Offline]


def view_of(cluster: Cluster, metadata: ClusterMetadata) -> ClusterView:
    cluster_id, controller_id, brokers = describe_brokers(cluster, metadata)
    leads = {b.node_id: 0 for b in brokers}
    offline: list[Offline] = []
    partitions = 0
    for name in sorted(metadata.topics):
        topic = metadata.topics[name]
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            partitions += 1
            if p.leader < 0:
                offline.append(Offline(name, index, tuple(p.replicas)))
            else:
                leads[p.leader] = leads.get(p.leader, 0) + 1
    return ClusterView(cluster_id, controller_id, brokers, leads, partitions, offline)


def describe_brokers(
    cluster: Cluster, metadata: ClusterMetadata
) -> tuple[str | None, int, list[Broker]]:
    """(cluster id, controller id, live brokers) by DescribeCluster, or from Metadata
    (without racks) when the broker does not serve DescribeCluster."""
    try:
        result = cluster.admin.describe_cluster(request_timeout=OPERATION_TIMEOUT).result(
            timeout=OPERATION_TIMEOUT
        )
    except KafkaException as exc:
        if not unsupported(exc):
            raise CliError(f"cannot describe the cluster: {describe_kafka_error(exc)}") from None
        brokers = [Broker(b.id, b.host, b.port, None) for b in metadata.brokers.values()]
        return metadata.cluster_id, metadata.controller_id, sorted(brokers, key=node_key)
    except TimeoutError:
        raise CliError(
            f"cannot describe the cluster: no answer within {OPERATION_TIMEOUT:g}s"
        ) from None
    controller = result.controller.id if result.controller is not None else -1
    brokers = [Broker(n.id, n.host, n.port, n.rack or None) for n in result.nodes]
    return result.cluster_id, controller, sorted(brokers, key=node_key)


def unsupported(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    name = err.name() if hasattr(err, "name") else ""
    return name in ("UNSUPPORTED_VERSION", "_UNSUPPORTED_FEATURE", "UNSUPPORTED_FEATURE")


def node_key(broker: Broker) -> int:
    return broker.node_id


def print_view(view: ClusterView) -> None:
    controller = str(view.controller_id) if view.controller_id >= 0 else "none"
    print(
        f"ClusterId: {view.cluster_id or '-'}\tController: {controller}\t"
        f"Brokers: {len(view.brokers)}\tPartitions: {view.partitions}\t"
        f"OfflinePartitions: {len(view.offline)}"
    )
    rows = [
        (
            b.node_id,
            b.host,
            b.port,
            b.rack or "-",
            "yes" if b.node_id == view.controller_id else "no",
            view.leads.get(b.node_id, 0),
        )
        for b in view.brokers
    ]
    print_table(["BROKER", "HOST", "PORT", "RACK", "CONTROLLER", "LEADER-PARTITIONS"], rows)
    if view.offline:
        # No live broker leads these: their replicas are on brokers that are down.
        print()
        print_table(
            ["OFFLINE-TOPIC", "PARTITION", "REPLICAS"],
            [(o.topic, o.partition, ",".join(map(str, o.replicas)) or "-") for o in view.offline],
        )


ELECTION_TYPES = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}


def elect_leaders(args: argparse.Namespace) -> int:
    """Kafka's kafka-leader-election: what was elected and what needed no election on
    stdout, one line per partition that failed on stderr, exit 1 if any did."""
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", exit_code=2)
    cluster = Cluster.from_args(args)
    partitions: list[TopicPartition] | None = None
    if args.topic is not None:
        indexes = [args.partition] if args.partition is not None else cluster.partitions(args.topic)
        partitions = [TopicPartition(args.topic, p) for p in indexes]
    else:
        cluster.metadata()  # fails with one line when no broker answers
    kind = ELECTION_TYPES[args.type]
    # confluent-kafka 2.16's binding fails on any timeout keyword; its defaults
    # (socket.timeout.ms) apply, and `wait` bounds the wait.
    future = cluster.admin.elect_leaders(kind, partitions)
    results: dict[TopicPartition, Any] = wait(future, "cannot elect leaders")
    elected, not_needed, failed = [], [], []
    for tp in sorted(results, key=lambda t: (t.topic, t.partition)):
        err = results[tp]
        name = f"{tp.topic}-{tp.partition}"
        code = error_code(err)
        if code is None:
            elected.append(name)
        elif code == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(name)
        else:
            failed.append((name, err))
    label = kind.name
    if elected:
        print(
            f"Successfully completed leader election ({label}) for partitions {', '.join(elected)}"
        )
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if not (elected or not_needed or failed):
        print(f"No partition needed a leader election ({label}).")
    for name, err in failed:
        print(
            f"chronik: error: leader election ({label}) failed for {name}: "
            f"{describe_kafka_error(err)}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def error_code(err: Any) -> int | None:
    """The code of a per-partition result: None for success."""
    if err is None:
        return None
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    return err.code() if isinstance(err, KafkaError) else KafkaError.UNKNOWN
