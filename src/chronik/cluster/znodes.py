# The cluster's state in ZooKeeper, laid out as Kafka's ZooKeeper mode lays it out (paths
# under the chroot of zookeeper.connect), so ZooKeeper's own shell shows what it would
# show for Kafka. Every value is UTF-8 JSON unless said otherwise.
#   /cluster/id                      {"version":"1","id":"<cluster id>"}
#   /brokers/ids/<id>                ephemeral {"version":5,"host":h,"port":p,
#                                    "endpoints":["PLAINTEXT://h:p"],"listener_security_
#                                    protocol_map":{"PLAINTEXT":"PLAINTEXT"},"rack":r|null,
#                                    "jmx_port":-1,"features":{},"timestamp":"<ms>",
#                                    "schema_registry":"http://h:p" (chronik's, when served),
#                                    "http_api":"http://h:p" (chronik's: its HTTP listener,
#                                    event store and console, when served)};
#                                    its czxid is the broker epoch (Kafka's, KIP-380)
#   /controller                      ephemeral {"version":1,"brokerid":N,"timestamp":"<ms>"}
#   /controller_epoch                the epoch as a decimal string, "1" for the first
#   /brokers/topics/<t>              {"version":3,"partitions":{"0":[2,1],...},
#                                    "topic_id":"<base64url uuid>","adding_replicas":{},
#                                    "removing_replicas":{}}: each partition's replicas,
#                                    the preferred leader first; during a reassignment
#                                    the original and target replicas together (target
#                                    first), with the target's new ones under
#                                    adding_replicas and the leaving ones under
#                                    removing_replicas (KIP-455), so a new controller
#                                    carries on where the last one stopped
#   /brokers/topics/<t>/partitions/<p>/state
#                                    {"controller_epoch":E,"leader":L,"version":1,
#                                    "leader_epoch":LE,"isr":[...]}; leader -1: none
#   /config/topics/<t>               {"version":1,"config":{name: value}}: the overrides
#   /config/users/<user>             {"version":1,"config":{"SCRAM-SHA-256":"salt=...,
#                                    stored_key=...,server_key=...,iterations=4096"}}
#   /config/brokers/<id>, /config/brokers/<default>
#                                    {"version":1,"config":{name: value}}: a broker's
#                                    dynamic configs, and the cluster-wide default's
#   /config/users/<user>/clients/<client-id>, /config/clients/<client-id>
#                                    {"version":1,"config":{"producer_byte_rate":"1024"}}:
#                                    client quotas (user and client-id sanitized as Kafka's
#                                    Sanitizer does, <default> for the default); a user's
#                                    quotas share /config/users/<user> with its credentials
#   /config/changes/config_change_<seq>  {"version":2,"entity_path":"topics/<t>"} (or
#                                    "users/<user>", "clients/<id>",
#                                    "users/<user>/clients/<id>", "brokers/<id>")
#   /admin/delete_topics/<t>         empty: a deletion asked for, done by the controller
#   /admin/reassign_partitions       {"version":1,"partitions":[{"topic":t,"partition":p,
#                                    "replicas":[...]}]}: reassignments asked for by
#                                    Kafka's ZooKeeper-mode tools; the controller starts
#                                    them and removes each partition once it completes
#   /latest_producer_id_block        {"version":1,"broker":N,"block_start":"s",
#                                    "block_end":"e"}: the last block of producer ids taken
#   /kafka-acl/<Type>/<name>         {"version":1,"acls":[{"principal":"User:alice",
#                                    "permissionType":"Allow","operation":"Read",
#                                    "host":"*"}]}: the LITERAL bindings of one resource;
#                                    <Type> is Topic, Group, Cluster, TransactionalId,
#                                    DelegationToken or User; deleted when emptied
#   /kafka-acl-extended/prefixed/<Type>/<name>
#                                    the same, for the PREFIXED bindings of a prefix
#   /kafka-acl-changes/acl_changes_<seq>
#                                    UTF-8 text "TOPIC:<name>" (the Java enum's name, then
#                                    the resource's): a LITERAL resource's bindings changed
#   /kafka-acl-extended-changes/acl_changes_<seq>
#                                    {"version":1,"resourceType":"TOPIC","name":n,
#                                    "patternType":"PREFIXED"}: a PREFIXED one's did
from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_USERS = "/config/users"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
ACLS = "/kafka-acl"
ACLS_EXTENDED = "/kafka-acl-extended"
ACLS_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
# The resource types Kafka's authorizer makes a znode for under each ACL root at start.
ACL_RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")
# What Kafka's brokers create at start, so its tools find the tree they expect.
PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    CONFIG_BROKERS,
    "/config/clients",
    CONFIG_USERS,
    DELETE_TOPICS,
    "/brokers/seqid",
    "/isr_change_notification",
    "/log_dir_event_notification",
)


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """A broker's dynamic configs (entity: its id), or the cluster default's ("<default>")."""
    return f"{CONFIG_BROKERS}/{entity}"


def user_path(user: str) -> str:
    return f"{CONFIG_USERS}/{user}"


def delete_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def acl_root(prefixed: bool) -> str:
    return ACLS_PREFIXED if prefixed else ACLS


def acl_path(resource_type: str, name: str, prefixed: bool) -> str:
    """``resource_type`` as Kafka names it in the path (Topic, TransactionalId, ...)."""
    return f"{acl_root(prefixed)}/{resource_type}/{name}"


def acl_changes_path(prefixed: bool) -> str:
    return ACL_EXTENDED_CHANGES if prefixed else ACL_CHANGES


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _now_ms() -> str:
    return str(time.time_ns() // 1_000_000)


def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka writes a Uuid as URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def uuid_from_kafka(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


# -- values ------------------------------------------------------------------------------


def cluster_id_value(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def parse_cluster_id(data: bytes) -> str:
    return str(json.loads(data)["id"])


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    # (listener name, security protocol, host, port) of every listener; host and port
    # above are the inter-broker listener's.
    endpoints: tuple[tuple[str, str, str, int], ...] = ()
    # The base URL of its schema registry (chronik's field; Kafka's readers ignore it).
    schema_registry: str | None = None
    # The base URL of its HTTP listener: the event store's API and the console (chronik's
    # field too), where requests about partitions it leads are forwarded.
    http_api: str | None = None
    # The broker epoch: the czxid of the registration, new with each registration (not
    # in the JSON); -1 when not read from ZooKeeper.
    epoch: int = -1

    def endpoint(self, listener: str) -> tuple[str, int]:
        """Where a client of ``listener`` reaches this broker (Kafka answers each
        client with the endpoints of the listener it came in on)."""
        for name, _, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


def broker_value(info: BrokerInfo) -> bytes:
    endpoints = info.endpoints or (("PLAINTEXT", "PLAINTEXT", info.host, info.port),)
    return _dump(
        {
            "features": {},
            "listener_security_protocol_map": {name: proto for name, proto, _, _ in endpoints},
            "endpoints": [f"{name}://{host}:{port}" for name, _, host, port in endpoints],
            "jmx_port": -1,
            "port": info.port,
            "host": info.host,
            "version": 5,
            "timestamp": _now_ms(),
            "rack": info.rack,
            **({"schema_registry": info.schema_registry} if info.schema_registry else {}),
            **({"http_api": info.http_api} if info.http_api else {}),
        }
    )


def parse_broker(node_id: int, data: bytes, epoch: int = -1) -> BrokerInfo:
    value = json.loads(data)
    host, port = value.get("host"), value.get("port", -1)
    protocols = value.get("listener_security_protocol_map") or {}
    endpoints: list[tuple[str, str, str, int]] = []
    for endpoint in value.get("endpoints", ()):
        # NAME://host:port; the first endpoint when host is not set (Kafka >= 0.10)
        name, _, address = endpoint.partition("://")
        ep_host, _, text = address.rpartition(":")
        endpoints.append((name, protocols.get(name, name), ep_host.strip("[]"), int(text)))
    if (host is None or port == -1) and endpoints:
        host, port = endpoints[0][2], endpoints[0][3]
    registry = value.get("schema_registry")
    http_api = value.get("http_api")
    return BrokerInfo(
        node_id,
        str(host),
        int(port),
        value.get("rack"),
        tuple(endpoints),
        schema_registry=registry if isinstance(registry, str) else None,
        http_api=http_api if isinstance(http_api, str) else None,
        epoch=epoch,
    )


def controller_value(node_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": node_id, "timestamp": _now_ms()})


def parse_controller(data: bytes | None) -> int:
    if not data:
        return -1
    try:
        return int(json.loads(data)["brokerid"])
    except (ValueError, KeyError, TypeError):
        return -1


@dataclass
class Assignment:
    """/brokers/topics/<t>: a topic's id, each partition's replicas, and the replicas
    being added and removed by the partitions' reassignments in progress."""

    topic_id: uuid.UUID
    replicas: dict[int, list[int]] = field(default_factory=dict)
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def reassigning(self, partition: int) -> bool:
        return bool(self.adding.get(partition) or self.removing.get(partition))

    def target(self, partition: int) -> list[int]:
        """The replicas the partition ends with: all of them but those being removed."""
        removing = self.removing.get(partition, ())
        return [r for r in self.replicas.get(partition, ()) if r not in removing]

    def original(self, partition: int) -> list[int]:
        """The replicas the partition had before its reassignment began."""
        adding = self.adding.get(partition, ())
        return [r for r in self.replicas.get(partition, ()) if r not in adding]


def assignment_value(assignment: Assignment) -> bytes:
    def non_empty(lists: dict[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): r for p, r in sorted(lists.items()) if r}

    return _dump(
        {
            "version": 3,
            "partitions": {str(p): r for p, r in sorted(assignment.replicas.items())},
            "topic_id": uuid_to_kafka(assignment.topic_id),
            "adding_replicas": non_empty(assignment.adding),
            "removing_replicas": non_empty(assignment.removing),
        }
    )


def parse_assignment(data: bytes) -> Assignment:
    value = json.loads(data)
    text = value.get("topic_id")
    topic_id = uuid_from_kafka(text) if text else uuid.UUID(int=0)

    def lists(key: str) -> dict[int, list[int]]:
        found = value.get(key) or {}
        return {int(p): [int(b) for b in r] for p, r in found.items() if r}

    replicas = {int(p): [int(b) for b in r] for p, r in value.get("partitions", {}).items()}
    return Assignment(
        topic_id,
        replicas,
        {p: r for p, r in lists("adding_replicas").items() if p in replicas},
        {p: r for p, r in lists("removing_replicas").items() if p in replicas},
    )


def reassignments_value(targets: dict[tuple[str, int], list[int]]) -> bytes:
    return _dump(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r}
                for (t, p), r in sorted(targets.items())
            ],
        }
    )


def parse_reassignments(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    """/admin/reassign_partitions: each partition's target replicas (empty: none)."""
    if not data:
        return {}
    value = json.loads(data)
    targets: dict[tuple[str, int], list[int]] = {}
    for entry in value.get("partitions") or ():
        targets[(str(entry["topic"]), int(entry["partition"]))] = [
            int(b) for b in entry["replicas"]
        ]
    return targets


@dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state, and the znode version it was read at."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1


def state_value(state: PartitionState) -> bytes:
    return _dump(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def parse_state(data: bytes, zk_version: int) -> PartitionState:
    value = json.loads(data)
    return PartitionState(
        int(value["leader"]),
        int(value["leader_epoch"]),
        tuple(int(b) for b in value["isr"]),
        int(value["controller_epoch"]),
        zk_version,
    )


def config_value(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": configs})


def parse_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


def config_change_value(topic: str, entity: str = "topics") -> bytes:
    return _dump({"version": 2, "entity_path": f"{entity}/{topic}"})


def entity_config_path(entity_path: str) -> str:
    """The znode of a config entity named by its path (`users/<u>/clients/<c>`, ...)."""
    return f"/config/{entity_path}"


def entity_change_value(entity_path: str) -> bytes:
    return _dump({"version": 2, "entity_path": entity_path})


def parse_config_change(data: bytes) -> str:
    """The entity path a /config/changes notice names."""
    return str(json.loads(data)["entity_path"])


def producer_id_block_value(node_id: int, start: int, end: int) -> bytes:
    return _dump(
        {"version": 1, "broker": node_id, "block_start": str(start), "block_end": str(end)}
    )


def parse_producer_id_block(data: bytes | None) -> int:
    """The last id of the latest block taken (-1: none yet)."""
    if not data:
        return -1
    return int(json.loads(data)["block_end"])


def acls_value(entries: list[dict[str, str]]) -> bytes:
    """A resource's znode: each entry {"principal","permissionType","operation","host"}."""
    return _dump({"version": 1, "acls": entries})


def parse_acls(data: bytes | None) -> list[dict[str, Any]]:
    if not data:
        return []
    entries = json.loads(data)["acls"]
    if not isinstance(entries, list):
        raise ValueError("acls is not a list")
    return entries


def acl_change_value(resource_type: str, name: str, pattern: str) -> bytes:
    """A change notice; ``resource_type`` and ``pattern`` are Java enum names (TOPIC,
    TRANSACTIONAL_ID; LITERAL, PREFIXED). LITERAL: Kafka's legacy "TYPE:name" text."""
    if pattern == "LITERAL":
        return f"{resource_type}:{name}".encode()
    return _dump(
        {"version": 1, "resourceType": resource_type, "name": name, "patternType": pattern}
    )


def parse_acl_change(data: bytes, prefixed: bool) -> tuple[str, str, str]:
    """(resource type, name, pattern), as Java enum names, of a change notice."""
    if not prefixed:
        resource_type, sep, name = data.decode().partition(":")
        if not sep:
            raise ValueError(f"not TYPE:NAME: {data!r}")
        return resource_type.upper(), name, "LITERAL"
    value = json.loads(data)
    return str(value["resourceType"]).upper(), str(value["name"]), str(value["patternType"]).upper()
