"""What the reassignment commands ask the cluster, and how.

Metadata, DescribeCluster, ListOffsets, IncrementalAlterConfigs (the replication
throttles) and ElectLeaders go through confluent-kafka's AdminClient.
AlterPartitionReassignments (45) and ListPartitionReassignments (46), which it has no
method for, go to the controller (found by DescribeCluster) as kio-built requests on
chronik's broker client; DescribeLogDirs (35) goes to every broker, when the cluster
serves it, for partition sizes.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from chronik.cli.broker_requests import args_security, ask, error_name, send
from chronik.cli.clients import OPERATION_TIMEOUT, Cluster, wait
from chronik.cli.cluster import Broker, describe_brokers, error_code
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.cli.reassignment_json import partition_name
from chronik.cluster.replica_client import request_module

ALTER = (45, 0)
LIST = (46, 0)
LOG_DIRS = (35, 1)
API_VERSIONS = (18, 0)
NOT_CONTROLLER = 41
API_NAMES = {45: "AlterPartitionReassignments", 46: "ListPartitionReassignments"}
# Kafka's QuotaConfigs names.
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

TP = tuple[str, int]


@dataclass(frozen=True)
class Ongoing:
    """A reassignment in progress: every replica it involves, those being added and
    those being removed (ListPartitionReassignments' fields)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def sources(self) -> set[int]:
        return set(self.replicas) - set(self.adding)

    @property
    def target(self) -> list[int]:
        return [b for b in self.replicas if b not in self.removing]


@dataclass
class Topology:
    controller: int
    brokers: dict[int, Broker]
    # Partition -> replicas in assignment order, and its leader (-1: none).
    replicas: dict[TP, list[int]]
    leaders: dict[TP, int]

    def racks(self, rack_aware: bool = True) -> dict[int, str | None]:
        return {b.node_id: (b.rack if rack_aware else None) for b in self.brokers.values()}


class ClusterAdmin:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster = Cluster.from_args(args)
        self._security: Any = None
        self._controller: Broker | None = None
        self._apis: set[int] | None = None

    # --- reading ----------------------------------------------------------------------

    def topology(self, topics: Iterable[str] | None = None, strict: bool = True) -> Topology:
        """Brokers, controller and assignment (of `topics`, or of every topic); a topic
        named that does not exist is an error when `strict`, else left out."""
        metadata = self.cluster.metadata()
        _, controller, brokers = describe_brokers(self.cluster, metadata)
        wanted = None if topics is None else list(topics)
        for name in wanted or ():
            if not strict:
                continue
            if name not in metadata.topics:
                raise CliError(f"Topic {name} not found.")
            if metadata.topics[name].error is not None:
                raise CliError(f"topic {name}: {describe_kafka_error(metadata.topics[name].error)}")
        replicas: dict[TP, list[int]] = {}
        leaders: dict[TP, int] = {}
        for name, topic in metadata.topics.items():
            if wanted is not None and name not in wanted:
                continue
            if topic.error is not None:
                continue
            for index, p in topic.partitions.items():
                replicas[(name, index)] = list(p.replicas)
                leaders[(name, index)] = p.leader
        by_id = {b.node_id: b for b in brokers}
        self._controller = by_id.get(controller)
        return Topology(controller, by_id, replicas, leaders)

    def _controller_node(self) -> Broker:
        if self._controller is None:
            self.topology(())
        if self._controller is None:
            raise CliError("the cluster has no controller right now; try again")
        return self._controller

    def to_controller(self, api: tuple[int, int], **fields: Any) -> Any:
        """A request to the controller, asked again (up to three times) when the
        controller moved meanwhile."""
        if not self.serves(api[0]):
            name = API_NAMES.get(api[0], f"API {api[0]}")
            raise CliError(f"the cluster does not serve {name} (API {api[0]})")
        if self._security is None:
            self._security = args_security(self.args)
        for _ in range(3):
            node = self._controller_node()
            response = send(node.host, node.port, api, self._security, self.args.connect_timeout,
                            OPERATION_TIMEOUT + 5, **fields)
            if int(response.error_code) != NOT_CONTROLLER:
                return response
            self._controller = None
        raise CliError("the controller kept moving; try again")

    def ongoing(self, partitions: Iterable[TP] | None = None) -> dict[TP, Ongoing]:
        """ListPartitionReassignments: the reassignments in progress (of `partitions`)."""
        module = request_module(*LIST)
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in partitions:
                by_topic.setdefault(topic, []).append(index)
            topics = tuple(
                module.ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(sorted(p)))
                for t, p in sorted(by_topic.items())
            )
        response = self.to_controller(LIST, timeout=int(OPERATION_TIMEOUT * 1000), topics=topics)
        if int(response.error_code):
            raise CliError(
                "cannot list partition reassignments: "
                f"{response.error_message or error_name(response.error_code)}"
            )
        out: dict[TP, Ongoing] = {}
        for topic in response.topics:
            for p in topic.partitions:
                out[(topic.name, int(p.partition_index))] = Ongoing(
                    tuple(map(int, p.replicas)), tuple(map(int, p.adding_replicas)),
                    tuple(map(int, p.removing_replicas)),
                )
        return out

    # --- changing ---------------------------------------------------------------------

    def reassign(self, targets: Mapping[TP, Sequence[int] | None]) -> dict[TP, str]:
        """AlterPartitionReassignments (None cancels); the partitions that failed, each
        with its reason."""
        module = request_module(*ALTER)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), replicas in sorted(targets.items()):
            by_topic.setdefault(topic, []).append(
                module.ReassignablePartition(
                    partition_index=index,
                    replicas=None if replicas is None else tuple(replicas),
                )
            )
        request_topics = tuple(
            module.ReassignableTopic(name=t, partitions=tuple(p)) for t, p in by_topic.items()
        )
        response = self.to_controller(ALTER, timeout=int(OPERATION_TIMEOUT * 1000),
                                      topics=request_topics)
        if int(response.error_code):
            reason = _reason(response.error_code, response.error_message)
            return dict.fromkeys(targets, reason)
        failed: dict[TP, str] = {}
        for topic in response.responses:
            for p in topic.partitions:
                if int(p.error_code):
                    failed[(topic.name, int(p.partition_index))] = _reason(
                        p.error_code, p.error_message
                    )
        return failed

    def set_throttles(
        self, rate: int, leaders: Mapping[str, str], followers: Mapping[str, str],
        brokers: Iterable[int],
    ) -> None:
        """Kafka's reassignment throttle: the rate on each broker involved, the
        throttled replicas on each topic (IncrementalAlterConfigs SET)."""
        for topic in sorted(set(leaders) | set(followers)):
            entries = []
            if topic in leaders:
                entries.append(_set(LEADER_REPLICAS, leaders[topic]))
            if topic in followers:
                entries.append(_set(FOLLOWER_REPLICAS, followers[topic]))
            self._alter(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
        for broker in sorted(brokers):
            self._alter(ConfigResource(
                ResourceType.BROKER, str(broker),
                incremental_configs=[_set(LEADER_RATE, str(rate)), _set(FOLLOWER_RATE, str(rate))],
            ))

    def clear_throttles(self, brokers: Iterable[int], topics: Iterable[str]) -> None:
        """Kafka's clearAllThrottles: the broker rates and the topics' throttled replicas
        deleted."""
        for broker in sorted(brokers):
            self._alter(ConfigResource(
                ResourceType.BROKER, str(broker),
                incremental_configs=[_delete(LEADER_RATE), _delete(FOLLOWER_RATE),
                                     _delete(LOG_DIRS_RATE)],
            ))
        for topic in sorted(topics):
            self._alter(ConfigResource(
                ResourceType.TOPIC, topic,
                incremental_configs=[_delete(LEADER_REPLICAS), _delete(FOLLOWER_REPLICAS)],
            ))

    def _alter(self, resource: ConfigResource) -> None:
        # One resource a call: librdkafka sends a broker's configs to that broker alone.
        futures = self.cluster.admin.incremental_alter_configs(
            [resource], request_timeout=OPERATION_TIMEOUT
        )
        kind = "broker" if resource.restype == ResourceType.BROKER else "topic"
        for future in futures.values():
            wait(future, f"cannot alter the configs of {kind} {resource.name}")

    def elect_preferred(self, partitions: Iterable[TP]) -> tuple[list[TP], dict[TP, str]]:
        """A preferred leader election; (partitions elected, partitions that failed)."""
        wanted = [TopicPartition(t, p) for t, p in sorted(partitions)]
        if not wanted:
            return [], {}
        results: dict[TopicPartition, Any] = wait(
            self.cluster.admin.elect_leaders(ElectionType.PREFERRED, wanted),
            "cannot elect the preferred leaders",
        )
        elected, failed = [], {}
        for tp, err in results.items():
            code = error_code(err)
            if code is None:
                elected.append((tp.topic, tp.partition))
            elif code != KafkaError.ELECTION_NOT_NEEDED:
                failed[(tp.topic, tp.partition)] = describe_kafka_error(err)
        return sorted(elected), failed

    # --- sizes ------------------------------------------------------------------------

    def sizes(self, topology: Topology) -> tuple[dict[TP, int], bool]:
        """Each partition's size: (sizes, True) in bytes by DescribeLogDirs when the
        cluster serves it, else (sizes, False) in records, from ListOffsets."""
        if self.serves(LOG_DIRS[0]):
            sizes: dict[TP, int] = {}
            security = args_security(self.args)
            for broker in topology.brokers.values():
                response = send(broker.host, broker.port, LOG_DIRS, security,
                                self.args.connect_timeout, OPERATION_TIMEOUT, topics=None)
                for result in response.results:
                    if int(result.error_code):
                        continue
                    for topic in result.topics:
                        for p in topic.partitions:
                            tp = (topic.name, int(p.partition_index))
                            if tp in topology.replicas and not p.is_future_key:
                                sizes[tp] = max(sizes.get(tp, 0), int(p.partition_size))
            return sizes, True
        readable = [TopicPartition(t, p) for (t, p), leader in topology.leaders.items()
                    if leader >= 0]
        marks = self.cluster.watermarks(readable)
        return {tp: max(0, end - start) for tp, (start, end) in marks.items()}, False

    def serves(self, api_key: int) -> bool:
        """Whether the bootstrap broker lists the API in its ApiVersions answer."""
        if self._apis is None:
            response = ask(self.args, API_VERSIONS)
            self._apis = {int(k.api_key) for k in response.api_keys}
        return api_key in self._apis


def _set(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def _delete(name: str) -> ConfigEntry:
    return ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)


def _reason(code: Any, message: str | None) -> str:
    name = error_name(code)
    return f"{message} ({name})" if message else name


def describe_failures(failed: Mapping[TP, str], what: str) -> str:
    """One line naming every partition that failed and why."""
    return f"{what}: " + "; ".join(
        f"{partition_name(tp)}: {reason}" for tp, reason in sorted(failed.items())
    )

