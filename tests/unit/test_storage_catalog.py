"""Catalog: topics on disk, created, altered, deleted and reloaded."""
from __future__ import annotations

import pytest
from test_storage_support import append, client_batch

from chronik.storage.catalog import Catalog
from chronik.storage.errors import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    StorageError,
)


def reopen(cat: Catalog, broker=None) -> Catalog:
    cat.close()
    again = Catalog(cat.data_dir, broker or cat.broker_configs)
    again.load()
    return again


def test_create_persist_and_reload(tmp_path):
    cat = Catalog(tmp_path, {"log.segment.bytes": "4096"})
    cat.load()
    topic = cat.create_topic("orders.v1", 3, {"retention.ms": "1000"})
    assert [p.directory.name for p in topic.partitions] == ["orders.v1-0", "orders.v1-1",
                                                            "orders.v1-2"]
    assert topic.log_config.segment_bytes == 4096 and topic.log_config.retention_ms == 1000
    append(topic.partitions[1], client_batch(2))
    again = reopen(cat)
    t2 = again.get("orders.v1")
    assert t2.topic_id == topic.topic_id
    assert t2.configs == {"retention.ms": "1000"}
    assert len(t2.partitions) == 3 and t2.partitions[1].end_offset == 2
    again.close()


@pytest.mark.parametrize(
    ("name", "partitions", "configs", "code"),
    [
        ("", 1, {}, INVALID_TOPIC_EXCEPTION),
        ("..", 1, {}, INVALID_TOPIC_EXCEPTION),
        ("a/b", 1, {}, INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, {}, INVALID_TOPIC_EXCEPTION),
        ("ok", 0, {}, INVALID_PARTITIONS),
        ("ok", 1, {"retention.ms": "x"}, INVALID_CONFIG),
        ("ok", 1, {"nope": "1"}, INVALID_CONFIG),
    ],
)
def test_bad_creates_raise_with_kafka_codes(tmp_path, name, partitions, configs, code):
    cat = Catalog(tmp_path)
    cat.load()
    with pytest.raises(StorageError) as info:
        cat.create_topic(name, partitions, configs)
    assert info.value.code == code
    assert cat.topics == {}
    assert [p.name for p in tmp_path.iterdir()] == [".meta"]


def test_exists_collision_and_validate_only(tmp_path):
    cat = Catalog(tmp_path)
    cat.load()
    cat.create_topic("a.b", 1)
    with pytest.raises(StorageError) as info:
        cat.create_topic("a.b", 1)
    assert info.value.code == TOPIC_ALREADY_EXISTS
    with pytest.raises(StorageError) as info:
        cat.create_topic("a_b", 1)
    assert info.value.code == INVALID_TOPIC_EXCEPTION
    cat.create_topic("dry", 2, validate_only=True)
    assert cat.get("dry") is None and not (tmp_path / "dry-0").exists()


def test_delete_removes_everything_and_name_can_be_reused(tmp_path):
    cat = Catalog(tmp_path)
    cat.load()
    t = cat.create_topic("gone", 2)
    append(t.partitions[0], client_batch(3))
    cat.delete_topic("gone")
    assert not (tmp_path / "gone-0").exists() and not (tmp_path / ".meta/gone.json").exists()
    with pytest.raises(StorageError) as info:
        cat.delete_topic("gone")
    assert info.value.code == UNKNOWN_TOPIC_OR_PARTITION
    t2 = cat.create_topic("gone", 1)
    assert t2.partitions[0].end_offset == 0 and t2.topic_id != t.topic_id
    assert reopen(cat).get("gone") is not None


def test_partition_dirs_without_metadata_are_removed_at_load(tmp_path):
    cat = Catalog(tmp_path)
    cat.load()
    t = cat.create_topic("half-deleted", 1)
    append(t.partitions[0], client_batch(1))
    cat.close()
    (tmp_path / ".meta/half-deleted.json").unlink()
    (tmp_path / "unrelated").mkdir()
    again = Catalog(tmp_path)
    again.load()
    assert again.get("half-deleted") is None
    assert not (tmp_path / "half-deleted-0").exists()
    assert (tmp_path / "unrelated").exists()


def test_create_partitions_and_alter_configs_persist(tmp_path):
    cat = Catalog(tmp_path)
    cat.load()
    cat.create_topic("t", 1, {"retention.ms": "5000", "segment.bytes": "9000"})
    with pytest.raises(StorageError) as info:
        cat.create_partitions("t", 1)
    assert info.value.code == INVALID_PARTITIONS
    cat.create_partitions("t", 4)
    cat.alter_topic_configs("t", {"cleanup.policy": "compact"}, ["retention.ms"])
    with pytest.raises(StorageError):
        cat.alter_topic_configs("t", {"segment.bytes": "-5"})
    t = cat.get("t")
    assert t.partitions[0].config.compact and t.partitions[3].config.compact
    again = reopen(cat)
    t = again.get("t")
    assert len(t.partitions) == 4
    assert t.configs == {"cleanup.policy": "compact", "segment.bytes": "9000"}
    assert t.log_config.retention_ms == 604800000
    with pytest.raises(StorageError) as info:
        again.partition("t", 4)
    assert info.value.code == UNKNOWN_TOPIC_OR_PARTITION


def test_broker_config_changes_reach_topics_without_overrides(tmp_path):
    cat = Catalog(tmp_path)
    cat.load()
    cat.create_topic("plain", 1)
    cat.create_topic("own", 1, {"retention.ms": "10"})
    cat.update_broker_configs({"log.retention.ms": "77"})
    assert cat.get("plain").partitions[0].config.retention_ms == 77
    assert cat.get("own").partitions[0].config.retention_ms == 10
