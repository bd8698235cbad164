"""Topic config resolution and validation."""
from __future__ import annotations

import pytest

from chronik.storage.config import (
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    TOPIC_CONFIGS,
    LogConfig,
    describe_topic_configs,
    validate_topic_configs,
)
from chronik.storage.errors import INVALID_CONFIG, InvalidConfig


def test_defaults_are_kafkas():
    cfg = LogConfig.from_configs({}, {})
    assert cfg.segment_bytes == 1073741824
    assert cfg.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.max_message_bytes == 1048588
    assert cfg.cleanup_policy == "delete" and cfg.delete and not cfg.compact


def test_topic_override_beats_broker_which_beats_default():
    broker = {"log.retention.hours": "1", "log.segment.bytes": "5000"}
    cfg = LogConfig.from_configs(broker, {"segment.bytes": "7000"})
    assert cfg.retention_ms == 3_600_000
    assert cfg.segment_bytes == 7000
    assert LogConfig.from_configs({**broker, "log.retention.ms": "10"}, {}).retention_ms == 10
    minutes = LogConfig.from_configs({"log.retention.minutes": "2", "log.retention.hours": "1"}, {})
    assert minutes.retention_ms == 120_000


@pytest.mark.parametrize(
    "configs",
    [
        {"no.such.config": "1"},
        {"retention.ms": "soon"},
        {"segment.bytes": "1"},
        {"cleanup.policy": "shred"},
        {"message.timestamp.type": "WallTime"},
        {"min.cleanable.dirty.ratio": "2"},
        {"segment.bytes": str(2**40)},
    ],
)
def test_bad_configs_are_rejected_with_invalid_config(configs):
    with pytest.raises(InvalidConfig) as info:
        validate_topic_configs(configs)
    assert info.value.code == INVALID_CONFIG


def test_compact_and_delete_policy():
    validate_topic_configs({"cleanup.policy": "compact,delete"})
    cfg = LogConfig.from_configs({}, {"cleanup.policy": "compact, delete"})
    assert cfg.compact and cfg.delete


def test_describe_lists_every_config_with_source_and_synonyms():
    entries = describe_topic_configs(
        {"log.retention.hours": "2"}, {"segment.bytes": "4096"}
    )
    by_name = {e.name: e for e in entries}
    assert set(by_name) == set(TOPIC_CONFIGS)
    assert by_name["segment.bytes"].value == "4096"
    assert by_name["segment.bytes"].source == SOURCE_TOPIC
    assert by_name["segment.bytes"].synonyms[0].source == SOURCE_TOPIC
    assert by_name["retention.ms"].value == "7200000"
    assert by_name["retention.ms"].source == SOURCE_STATIC_BROKER
    assert [s.name for s in by_name["retention.ms"].synonyms][:1] == ["log.retention.hours"]
    assert by_name["cleanup.policy"].source == SOURCE_DEFAULT


@pytest.mark.parametrize("version", ["0.10.0", "0.10.0.0", "0.10.0-IV1", "2.8", "2.8.1", "3.0-IV1"])
def test_message_format_version_takes_kafka_versions(version):
    validate_topic_configs({"message.format.version": version})


@pytest.mark.parametrize("version", ["0.7", "0.10.3", "4.0", "latest", ""])
def test_message_format_version_refuses_others(version):
    with pytest.raises(InvalidConfig):
        validate_topic_configs({"message.format.version": version})


def test_configs_without_a_broker_setting_list_no_default_synonym():
    (entry,) = describe_topic_configs({}, {}, ["leader.replication.throttled.replicas"])
    assert entry.value == "" and entry.source == SOURCE_DEFAULT and entry.synonyms == []
