"""Broker-level settings, named as Kafka names them (`--set key=value`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger("chronik.config")

# Settings the broker itself reads, with Kafka's defaults (or chronik's where noted).
BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "1",
    "broker.id": "1",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    # Kafka's -1 leaves request memory unbounded (its fetch responses are zero-copy
    # and take none). chronik holds requests and fetch responses in memory, so it
    # has a budget for both; see docs/configuration.md "Limits".
    "queued.max.request.bytes": "268435456",
    "fetch.max.bytes": "57671680",
    # Fetch sessions (KIP-227) the broker keeps at once; 0: none, every fetch is full.
    "max.incremental.fetch.session.cache.slots": "1000",
    "connections.max.idle.ms": "600000",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "log.retention.check.interval.ms": "300000",
    "log.flush.interval.messages": str(2**63 - 1),
    "offsets.topic.num.partitions": "50",
    # Capped to the live brokers when __consumer_offsets is created, as Kafka does.
    "offsets.topic.replication.factor": "3",
    # Kafka waits 3 s for more members before a new group's first rebalance; 300 ms
    # still gathers consumers started together, without Kafka's long first wait.
    "group.initial.rebalance.delay.ms": "300",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "offsets.retention.minutes": "10080",
    "transactional.id.expiration.ms": "604800000",
    # Transactions (Kafka's names and defaults).
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.segment.bytes": "104857600",
    "producer.id.expiration.ms": "86400000",
    # Kafka's controller refuses more than 10,000 new partitions in one request; chronik
    # makes that a setting, and caps the partitions of the whole broker (the name KIP-578
    # proposed for it; Kafka itself has no such limit).
    "max.partitions.per.request": "10000",
    "max.broker.partitions": "20000",
    # chronik's: descriptors kept open for segment and index files; -1 means half of the
    # soft RLIMIT_NOFILE at start (chronik.storage.file_cache).
    "log.open.files.max": "-1",
    # Cluster mode (chronik.cluster), switched on by zookeeper.connect. Kafka's defaults.
    "zookeeper.connect": "",
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.connection.timeout.ms": "18000",
    # Replication (cluster mode), Kafka's names and defaults.
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.backoff.ms": "1000",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "num.replica.fetchers": "1",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    # Controlled shutdown (cluster mode): leadership handed on before a broker stops.
    "controlled.shutdown.enable": "true",
    "controlled.shutdown.max.retries": "3",
    "controlled.shutdown.retry.backoff.ms": "5000",
    # The schema registry's topic (Confluent's kafkastore.topic.replication.factor),
    # capped to the live brokers when _schemas is created.
    "schema.registry.topic.replication.factor": "3",
    "schema.registry.topic.segment.bytes": "67108864",
    # Where the schema registry is served ("" = not served). DescribeConfigs of a broker
    # reports the URL it is reached at, so clients (the Spark source) can find it.
    "schema.registry.listen": "",
}

# Read only in cluster mode; on a single node they are reported as having no effect.
CLUSTER_KEYS = ("zookeeper.connect", "zookeeper.session.timeout.ms",
                "zookeeper.connection.timeout.ms", "broker.rack", "default.replication.factor",
                "min.insync.replicas", "unclean.leader.election.enable", "replica.lag.time.max.ms",
                "replica.fetch.max.bytes", "replica.fetch.min.bytes", "replica.fetch.wait.max.ms",
                "replica.fetch.response.max.bytes", "replica.fetch.backoff.ms",
                "replica.high.watermark.checkpoint.interval.ms", "num.replica.fetchers",
                "auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds",
                "leader.imbalance.per.broker.percentage", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                "controlled.shutdown.enable", "controlled.shutdown.max.retries",
                "controlled.shutdown.retry.backoff.ms")

# Kafka settings that only matter to a replicated cluster, or to parts chronik
# does not have; accepted so that an existing config file works, and reported.
IGNORED_PREFIXES = (
    "zookeeper.",
    "broker.rack",
    "controller.",
    "process.roles",
    "listener.security.protocol.map",
    "inter.broker.",
    "replica.",
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "num.replica.fetchers",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "log.dirs",
    "log.dir",
    "listeners",
    "advertised.listeners",
    "group.coordinator.",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "default.replication.factor",
    "auto.leader.rebalance.enable",
    "leader.imbalance.",
    "controlled.shutdown.",
    "ssl.",
    "sasl.",
    "metadata.",
    "confluent.",
)


class ConfigError(ValueError):
    pass


def _bool(value: str, key: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return lowered == "true"


def _int(value: str, key: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {value!r}") from None


def _per_ip_overrides(value: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: "host:count,host:count"."""
    overrides: dict[str, int] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host:
            raise ConfigError(f"max.connections.per.ip.overrides wants host:count, got {item!r}")
        overrides[host.strip("[]")] = _int(count, "max.connections.per.ip.overrides")
    return overrides


class BrokerConfig:
    """The effective broker settings: Kafka's defaults overlaid with the user's."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self.values: dict[str, str] = dict(BROKER_DEFAULTS)
        self.overrides: dict[str, str] = {k: str(v) for k, v in (overrides or {}).items()}
        self.values.update(self.overrides)
        if "broker.id" in self.overrides and "node.id" not in self.overrides:
            self.values["node.id"] = self.overrides["broker.id"]
        self.node_id = _int(self.values["node.id"], "node.id")
        self.num_partitions = _int(self.values["num.partitions"], "num.partitions")
        if self.num_partitions < 1:
            raise ConfigError("num.partitions must be at least 1")
        self.default_replication_factor = self._positive("default.replication.factor")
        self.auto_create_topics = _bool(
            self.values["auto.create.topics.enable"], "auto.create.topics.enable"
        )
        self.delete_topic_enable = _bool(self.values["delete.topic.enable"], "delete.topic.enable")
        self.message_max_bytes = _int(self.values["message.max.bytes"], "message.max.bytes")
        self.socket_request_max_bytes = _int(
            self.values["socket.request.max.bytes"], "socket.request.max.bytes"
        )
        self.queued_max_request_bytes = self._positive_or_unbounded("queued.max.request.bytes")
        self.fetch_max_bytes = self._at_least("fetch.max.bytes", 1024)
        self.fetch_session_cache_slots = self._at_least(
            "max.incremental.fetch.session.cache.slots", 0
        )
        self.connections_max_idle_ms = self._at_least("connections.max.idle.ms", -1)
        self.max_connections_per_ip = self._at_least("max.connections.per.ip", 0)
        self.max_connections_per_ip_overrides = _per_ip_overrides(
            self.values["max.connections.per.ip.overrides"]
        )
        # Absent: derived from the descriptor limit when the broker starts.
        self.max_connections: int | None = None
        if "max.connections" in self.values:
            self.max_connections = self._at_least("max.connections", 0)
        self.retention_check_interval_ms = _int(
            self.values["log.retention.check.interval.ms"], "log.retention.check.interval.ms"
        )
        self.max_partitions_per_request = self._positive("max.partitions.per.request")
        self.max_broker_partitions = self._positive("max.broker.partitions")
        self.log_open_files_max = _int(self.values["log.open.files.max"], "log.open.files.max")
        self.zookeeper_connect = self.values["zookeeper.connect"].strip()
        self.zookeeper_session_timeout_ms = self._at_least("zookeeper.session.timeout.ms", 1)
        self.zookeeper_connection_timeout_ms = self._at_least(
            "zookeeper.connection.timeout.ms", 1
        )
        self.rack = self.values.get("broker.rack") or None
        self.min_insync_replicas = self._positive("min.insync.replicas")
        self.unclean_leader_election = _bool(
            self.values["unclean.leader.election.enable"], "unclean.leader.election.enable"
        )
        self.replica_lag_time_max_ms = self._positive("replica.lag.time.max.ms")
        self.replica_fetch_max_bytes = self._positive("replica.fetch.max.bytes")
        self.replica_fetch_min_bytes = self._positive("replica.fetch.min.bytes")
        self.replica_fetch_wait_max_ms = self._at_least("replica.fetch.wait.max.ms", 0)
        self.replica_fetch_response_max_bytes = self._positive("replica.fetch.response.max.bytes")
        self.replica_fetch_backoff_ms = self._at_least("replica.fetch.backoff.ms", 0)
        self.hw_checkpoint_interval_ms = self._positive(
            "replica.high.watermark.checkpoint.interval.ms"
        )
        self.num_replica_fetchers = self._positive("num.replica.fetchers")
        self.auto_leader_rebalance = _bool(
            self.values["auto.leader.rebalance.enable"], "auto.leader.rebalance.enable"
        )
        self.leader_imbalance_check_seconds = self._positive(
            "leader.imbalance.check.interval.seconds"
        )
        self.leader_imbalance_percentage = self._at_least(
            "leader.imbalance.per.broker.percentage", 0
        )
        self.controlled_shutdown = _bool(
            self.values["controlled.shutdown.enable"], "controlled.shutdown.enable"
        )
        self.controlled_shutdown_max_retries = self._at_least(
            "controlled.shutdown.max.retries", 0
        )
        self.controlled_shutdown_backoff_ms = self._at_least(
            "controlled.shutdown.retry.backoff.ms", 0
        )
        if not self.clustered and self.default_replication_factor != 1:
            raise ConfigError("default.replication.factor must be 1 on a single-node broker")
        if self.zookeeper_connect and self.node_id < 0:
            raise ConfigError("broker.id must be set (0 or more) with zookeeper.connect")

    def _positive(self, key: str) -> int:
        value = _int(self.values[key], key)
        if value < 1:
            raise ConfigError(f"{key} must be at least 1, got {value}")
        return value

    def _at_least(self, key: str, low: int) -> int:
        value = _int(self.values[key], key)
        if value < low:
            raise ConfigError(f"{key} must be at least {low}, got {value}")
        return value

    def _positive_or_unbounded(self, key: str) -> int:
        value = _int(self.values[key], key)
        if value == 0 or value < -1:
            raise ConfigError(f"{key} must be positive, or -1 for no limit, got {value}")
        return value

    def get_int(self, key: str) -> int:
        return _int(self.values[key], key)

    @property
    def clustered(self) -> bool:
        return bool(self.zookeeper_connect)

    def ignored_keys(self) -> list[str]:
        from chronik.security.broker_security import KEYS as SECURITY_KEYS

        ignored = (
            k for k in self.overrides if k.startswith(IGNORED_PREFIXES) and k not in SECURITY_KEYS
        )
        if self.clustered:
            ignored = (k for k in ignored if k not in CLUSTER_KEYS)
        return sorted(ignored)
