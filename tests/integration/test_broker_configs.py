"""Kafka's dynamic broker configs (KIP-226) through confluent-kafka's AdminClient:
per-broker and cluster-default configs set, described with their source, deleted,
refused as Kafka refuses them, applied to topics without their own override, kept
across a restart, and in a cluster shared through ZooKeeper's /config/brokers."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from .helpers import RawClient, create_topic, topic_name

TIMEOUT = 30
BROKER = ConfigResource.Type.BROKER


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _alter_default(bootstrap: str, *ops, validate_only: bool = False) -> tuple[int, str]:
    """IncrementalAlterConfigs of the cluster default (resource name ""), which
    librdkafka does not send: a raw request; (error code, message)."""
    from kio.schema.incremental_alter_configs.v1 import request as r

    request = r.IncrementalAlterConfigsRequest(
        resources=(r.AlterConfigsResource(
            resource_type=4, resource_name="",
            configs=tuple(r.AlterableConfig(name=k, config_operation=int(op.value), value=v)
                          for k, op, v in ops)),),
        validate_only=validate_only,
    )
    with RawClient(bootstrap) as raw:
        result = raw.request(request).responses[0]
    return result.error_code, result.error_message or ""


def _describe_default(bootstrap: str, name: str = "", synonyms: bool = False) -> dict:
    """DescribeConfigs of the cluster default (or a broker), raw: name -> (value, source),
    or with ``synonyms`` name -> [source of each synonym, in order]."""
    from kio.schema.describe_configs.v4 import request as r

    request = r.DescribeConfigsRequest(
        resources=(r.DescribeConfigsResource(resource_type=4, resource_name=name,
                                             configuration_keys=None),),
        include_synonyms=True, include_documentation=False,
    )
    with RawClient(bootstrap) as raw:
        result = raw.request(request).results[0]
    assert result.error_code == 0
    if synonyms:
        return {c.name: [s.source for s in c.synonyms] for c in result.configs}
    return {c.name: (c.value, c.config_source) for c in result.configs}


def _alter(admin: AdminClient, name: str, *ops, validate_only: bool = False):
    entries = [ConfigEntry(key, value, incremental_operation=op) for key, op, value in ops]
    resource = ConfigResource(BROKER, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], validate_only=validate_only)
    return futures[resource].result(timeout=TIMEOUT)


def _describe(admin: AdminClient, kind, name: str) -> dict:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def _error(call) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def test_set_describe_delete_and_refusals(broker):
    admin = _admin(broker.bootstrap)
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE

    _alter(admin, "1", ("sasl.kerberos.min.time.before.relogin", SET, "58000"),
           ("background.threads", SET, "9"))
    configs = _describe(admin, BROKER, "1")
    entry = configs["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not entry.is_read_only
    assert configs["background.threads"].value == "9"
    assert configs["num.partitions"].is_read_only

    # The legacy AlterConfigs replaces this broker's whole set.
    resource = ConfigResource(BROKER, "1", set_config={"background.threads": "11"})
    admin.alter_configs([resource])[resource].result(timeout=TIMEOUT)
    configs = _describe(admin, BROKER, "1")
    assert configs["background.threads"].value == "11"
    assert configs["sasl.kerberos.min.time.before.relogin"].source == (
        ConfigSource.DEFAULT_CONFIG.value
    )

    _alter(admin, "1", ("background.threads", DELETE, None))
    entry = _describe(admin, BROKER, "1")["background.threads"]
    assert (entry.value, entry.source) == ("10", ConfigSource.DEFAULT_CONFIG.value)

    # Read at start only: INVALID_REQUEST with Kafka's message.
    err = _error(lambda: _alter(admin, "1", ("num.partitions", SET, "3")))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in err.str()
    # A bad value for its type: INVALID_CONFIG.
    err = _error(lambda: _alter(admin, "1", ("log.retention.ms", SET, "soon")))
    assert err.code() == KafkaError.INVALID_CONFIG
    # A per-broker config at the cluster default, and a bare keystore: INVALID_REQUEST.
    code, message = _alter_default(broker.bootstrap,
                                   ("sasl.kerberos.min.time.before.relogin", SET, "1"))
    assert code == KafkaError.INVALID_REQUEST
    assert "broker id must be specified" in message
    err = _error(lambda: _alter(admin, "1", ("ssl.keystore.location", SET, "/x")))
    assert err.code() == KafkaError.INVALID_REQUEST
    # APPEND only on lists; validate_only changes nothing.
    err = _error(lambda: _alter(admin, "1", ("background.threads", AlterConfigOpType.APPEND,
                                             "1")))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert _alter_default(broker.bootstrap, ("log.retention.ms", SET, "1234"),
                          validate_only=True) == (0, "")
    assert _describe_default(broker.bootstrap) == {}


def test_log_defaults_and_connection_limits_take_effect(broker):
    admin = _admin(broker.bootstrap)
    topic = topic_name("effect")
    create_topic(broker.bootstrap, topic, partitions=1)
    SET = AlterConfigOpType.SET
    _alter(admin, "1", ("log.retention.ms", SET, "4321"), ("message.max.bytes", SET, "2000"),
           ("max.connections.per.ip", SET, "77"))
    log_config = broker.broker.catalog.get(topic).partitions[0].config
    assert (log_config.retention_ms, log_config.max_message_bytes) == (4321, 2000)
    assert broker.broker._listener.max_per_ip == 77
    _alter(admin, "1", ("log.retention.ms", AlterConfigOpType.DELETE, None))
    assert broker.broker.catalog.get(topic).partitions[0].config.retention_ms == 604800000


def test_log_default_reaches_topics_and_survives_restart(broker_process):
    admin = _admin(broker_process.bootstrap)
    plain, own = topic_name("plain"), topic_name("own")
    create_topic(broker_process.bootstrap, plain, partitions=1)
    create_topic(broker_process.bootstrap, own, partitions=1, **{"retention.ms": "5000"})
    SET = AlterConfigOpType.SET

    assert _alter_default(broker_process.bootstrap, ("log.retention.ms", SET, "3600000"),
                          ("log.cleanup.policy", AlterConfigOpType.APPEND, "compact"))[0] == 0
    _alter(admin, "1", ("log.cleanup.policy", AlterConfigOpType.SUBTRACT, "compact"))

    topic = _describe(admin, ConfigResource.Type.TOPIC, plain)
    retention = topic["retention.ms"]
    assert retention.value == "3600000"
    assert retention.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    policy = topic["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert _describe(admin, ConfigResource.Type.TOPIC, own)["retention.ms"].value == "5000"
    assert _describe_default(broker_process.bootstrap) == {
        "log.retention.ms": ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        "log.cleanup.policy": ("delete,compact", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
    }

    broker_process.restart()
    admin = _admin(broker_process.bootstrap)
    configs = _describe(admin, BROKER, "1")
    assert configs["log.retention.ms"].value == "3600000"
    assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert configs["log.cleanup.policy"].value == "delete"
    assert configs["log.cleanup.policy"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert _describe_default(broker_process.bootstrap, "1", True)["log.cleanup.policy"] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
        ConfigSource.DEFAULT_CONFIG.value,
    ]
    topic = _describe(admin, ConfigResource.Type.TOPIC, plain)
    assert topic["retention.ms"].value == "3600000"


def test_cluster_configs_through_zookeeper(zookeeper, tmp_path):
    from .cluster_support import Cluster

    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 2).start()
    try:
        admin = _admin(cluster.broker(1).bootstrap)
        SET = AlterConfigOpType.SET
        assert _alter_default(cluster.broker(1).bootstrap,
                              ("log.retention.bytes", SET, "1048576"))[0] == 0
        _alter(admin, "2", ("log.segment.bytes", SET, "2097152"))
        assert cluster.get_json("/config/brokers/<default>") == {
            "version": 1, "config": {"log.retention.bytes": "1048576"}}
        assert cluster.get_json("/config/brokers/2")["config"] == {"log.segment.bytes": "2097152"}
        notices = [cluster.get_json(f"/config/changes/{c}")
                   for c in cluster.children("/config/changes")]
        assert {"version": 2, "entity_path": "brokers/2"} in notices

        other = _admin(cluster.broker(2).bootstrap)

        def seen() -> bool:
            configs = _describe(other, BROKER, "2")
            return (configs["log.retention.bytes"].value == "1048576"
                    and configs["log.segment.bytes"].value == "2097152")

        cluster.wait_until(seen, "broker 2 sees the dynamic configs")
        assert _describe(other, BROKER, "2")["log.segment.bytes"].source == (
            ConfigSource.DYNAMIC_BROKER_CONFIG.value
        )
        configs = _describe(admin, BROKER, "1")
        assert configs["log.retention.bytes"].source == (
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        )
        assert configs["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    finally:
        cluster.close()
