"""`chronik cluster describe`: the brokers of a cluster, its controller and who leads what.

Everything comes over the Kafka protocol from the one broker given: DescribeCluster for
the cluster id, the controller and each broker's rack, and Metadata for every partition's
leader. ZooKeeper is never asked, so the command works against any Kafka-compatible
cluster, and against a single chronik node (one broker, its own controller).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import ClusterMetadata

from chronik.cli.args import add_bootstrap
from chronik.cli.clients import OPERATION_TIMEOUT, Cluster
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.table import print_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    describe = sub.add_parser(
        "describe", help="brokers, the controller and the partitions each broker leads"
    )
    add_bootstrap(describe)


def run(args: argparse.Namespace) -> int:
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
