"""Topic config changes through confluent-kafka's AdminClient: IncrementalAlterConfigs'
APPEND and SUBTRACT on list configs, and the deprecated configs Kafka 3.x still accepts."""

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

from .helpers import create_topic, topic_name

TIMEOUT = 30


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _alter(admin: AdminClient, topic: str, *ops: tuple[str, AlterConfigOpType, str | None]):
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, op, value in ops]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    return admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)


def _describe(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def _error(call) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def test_append_and_subtract_change_cleanup_policy(broker):
    admin = _admin(broker)
    topic = topic_name("append")
    create_topic(broker.bootstrap, topic, partitions=1)

    # APPEND starts from the default (delete) when the topic has no override.
    _alter(admin, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    assert _describe(admin, topic)["cleanup.policy"].value == "delete,compact"
    # Values already present are not added twice.
    _alter(admin, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "compact,delete"))
    assert _describe(admin, topic)["cleanup.policy"].value == "delete,compact"

    _alter(admin, topic, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
    entry = _describe(admin, topic)["cleanup.policy"]
    assert entry.value == "compact"
    assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Subtracting a value that is not there changes nothing.
    _alter(admin, topic, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete"))
    assert _describe(admin, topic)["cleanup.policy"].value == "compact"


def test_append_to_a_throttled_replicas_list(broker):
    admin = _admin(broker)
    topic = topic_name("throttle")
    create_topic(broker.bootstrap, topic, partitions=1)
    name = "leader.replication.throttled.replicas"
    _alter(admin, topic, (name, AlterConfigOpType.APPEND, "0:1"))
    _alter(admin, topic, (name, AlterConfigOpType.APPEND, "1:1"))
    assert _describe(admin, topic)[name].value == "0:1,1:1"
    _alter(admin, topic, (name, AlterConfigOpType.SUBTRACT, "0:1"))
    assert _describe(admin, topic)[name].value == "1:1"


def test_append_to_a_non_list_config_is_invalid_config(broker):
    admin = _admin(broker)
    topic = topic_name("notlist")
    create_topic(broker.bootstrap, topic, partitions=1, **{"retention.ms": "60000"})
    err = _error(lambda: _alter(admin, topic, ("retention.ms", AlterConfigOpType.APPEND, "1")))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = _error(lambda: _alter(admin, topic, ("segment.ms", AlterConfigOpType.SUBTRACT, "1")))
    assert err.code() == KafkaError.INVALID_CONFIG
    # The whole resource is refused: nothing else in the request was applied.
    err = _error(
        lambda: _alter(
            admin,
            topic,
            ("retention.ms", AlterConfigOpType.SET, "120000"),
            ("segment.ms", AlterConfigOpType.APPEND, "1"),
        )
    )
    assert err.code() == KafkaError.INVALID_CONFIG
    assert _describe(admin, topic)["retention.ms"].value == "60000"


def test_a_result_that_is_not_a_valid_value_is_refused(broker):
    admin = _admin(broker)
    topic = topic_name("badlist")
    create_topic(broker.bootstrap, topic, partitions=1)
    op = ("cleanup.policy", AlterConfigOpType.APPEND, "shred")
    err = _error(lambda: _alter(admin, topic, op))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert _describe(admin, topic)["cleanup.policy"].value == "delete"


def test_deprecated_configs_are_accepted_and_described(broker):
    admin = _admin(broker)
    topic = topic_name("deprecated")
    create_topic(broker.bootstrap, topic, partitions=1, **{"message.format.version": "0.10.0"})
    entries = _describe(admin, topic)
    assert entries["message.format.version"].value == "0.10.0"
    assert entries["message.format.version"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["message.downconversion.enable"].value == "true"
    assert entries["message.timestamp.difference.max.ms"].is_default

    _alter(
        admin,
        topic,
        ("message.format.version", AlterConfigOpType.SET, "0.10.0.0"),
        ("message.timestamp.difference.max.ms", AlterConfigOpType.SET, "3600000"),
        ("message.downconversion.enable", AlterConfigOpType.SET, "false"),
    )
    entries = _describe(admin, topic)
    assert entries["message.format.version"].value == "0.10.0.0"
    assert entries["message.timestamp.difference.max.ms"].value == "3600000"
    assert entries["message.downconversion.enable"].value == "false"

    err = _error(
        lambda: _alter(admin, topic, ("message.format.version", AlterConfigOpType.SET, "0.7"))
    )
    assert err.code() == KafkaError.INVALID_CONFIG


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_legacy_alter_configs_accepts_message_format_version(broker):
    """librdkafka's test 0092 sets message.format.version with the non-incremental
    AlterConfigs, sending back every described config with it."""
    admin = _admin(broker)
    topic = topic_name("legacy")
    create_topic(broker.bootstrap, topic, partitions=1)
    described = _describe(admin, topic)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    for name, entry in described.items():
        resource.set_config(name, entry.value)
    resource.set_config("message.format.version", "0.10.0.0")
    admin.alter_configs([resource])[resource].result(timeout=TIMEOUT)
    assert _describe(admin, topic)["message.format.version"].value == "0.10.0.0"


def _produce_and_collect(bootstrap: str, topic: str, keys: list[bytes | None], **conf) -> list:
    from confluent_kafka import Producer

    results: list = [None] * len(keys)

    def delivered(i: int):
        return lambda err, msg: results.__setitem__(i, err)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, **conf})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"v%d" % i, partition=0, on_delivery=delivered(i))
    assert producer.flush(TIMEOUT) == 0
    return results


def test_compacted_topic_refuses_records_without_a_key(broker):
    """Kafka's rule, which librdkafka's test 0011 checks once APPEND has made a topic
    compacted: each keyless record is named in the response's record_errors."""
    admin = _admin(broker)
    topic = topic_name("compacted")
    create_topic(broker.bootstrap, topic, partitions=1)
    _alter(admin, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))

    keys = [None if i % 5 == 0 else b"k%d" % i for i in range(20)]
    # One batch: the keyless records fail as invalid, the others for being in their batch.
    errs = _produce_and_collect(broker.bootstrap, topic, keys)
    for key, err in zip(keys, errs, strict=True):
        assert err is not None
        if key is None:
            assert err.code() == KafkaError.INVALID_RECORD
        else:
            assert err.code() == KafkaError._INVALID_DIFFERENT_RECORD
    # One record per batch: only the keyless ones fail.
    errs = _produce_and_collect(broker.bootstrap, topic, keys, **{"batch.size": 1})
    for key, err in zip(keys, errs, strict=True):
        if key is None:
            assert err is not None and err.code() == KafkaError.INVALID_RECORD
        else:
            assert err is None
