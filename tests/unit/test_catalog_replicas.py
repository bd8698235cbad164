"""The catalog in cluster mode: a topic holds only the partitions assigned to this broker."""

from __future__ import annotations

import uuid

from chronik.storage.catalog import Catalog, run_steps


def test_sparse_topic_survives_a_restart_and_orphans_go(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.load()
    topic_id = uuid.uuid4()
    run_steps(catalog.ensure_replicas_steps("t", topic_id, 5, [1, 3], {"retention.ms": "-1"}))
    topic = catalog.get("t")
    assert topic is not None and topic.sparse
    assert [p is not None for p in topic.partitions] == [False, True, False, True, False]
    assert len(topic.local_logs()) == 2
    assert catalog.partition_count == 2
    catalog.close()

    (tmp_path / "t-2").mkdir()  # a creation cut short before the .meta file named it
    (tmp_path / "t-2" / "00000000000000000000.log").write_bytes(b"")
    again = Catalog(tmp_path)
    again.load()
    topic = again.get("t")
    assert topic is not None and topic.topic_id == topic_id and topic.sparse
    assert [p is not None for p in topic.partitions] == [False, True, False, True, False]
    assert topic.configs == {"retention.ms": "-1"}
    assert not (tmp_path / "t-2").exists()
    again.close()


def test_more_partitions_join_and_another_topic_id_replaces(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.load()
    first = uuid.uuid4()
    run_steps(catalog.ensure_replicas_steps("t", first, 2, [0], {}))
    run_steps(catalog.ensure_replicas_steps("t", first, 4, [0, 2], {}))
    topic = catalog.get("t")
    assert topic is not None and len(topic.partitions) == 4
    assert [p is not None for p in topic.partitions] == [True, False, True, False]

    second = uuid.uuid4()  # the topic was deleted and made again while we were away
    run_steps(catalog.ensure_replicas_steps("t", second, 1, [0], {}))
    topic = catalog.get("t")
    assert topic is not None and topic.topic_id == second and len(topic.partitions) == 1
    assert not (tmp_path / "t-2").exists()
    catalog.close()


def test_abandoned_steps_leave_nothing_served(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.load()
    steps = catalog.ensure_replicas_steps("t", uuid.uuid4(), 3, [0, 1, 2], {})
    next(steps)  # one partition made, not yet named by the .meta file
    steps.close()
    assert catalog.get("t") is None
    assert not any(tmp_path.glob("t-*"))
    catalog.close()


def test_a_full_disk_stores_nothing_and_a_later_try_succeeds(tmp_path, monkeypatch):
    import errno

    import pytest

    from chronik.storage.errors import KafkaStorageError

    catalog = Catalog(tmp_path)
    catalog.load()
    topic_id = uuid.uuid4()
    real_write = catalog._write_meta

    def full(topic):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(catalog, "_write_meta", full)
    with pytest.raises(KafkaStorageError):
        run_steps(catalog.ensure_replicas_steps("t", topic_id, 2, [0, 1], {}))
    assert catalog.get("t") is None
    assert not any(tmp_path.glob("t-*"))

    monkeypatch.setattr(catalog, "_write_meta", real_write)  # space is back
    run_steps(catalog.ensure_replicas_steps("t", topic_id, 2, [0, 1], {}))
    topic = catalog.get("t")
    assert topic is not None and len(topic.local_logs()) == 2
    catalog.close()


def test_a_moved_replica_left_by_a_crash_is_removed_at_the_next_start(tmp_path, monkeypatch):
    """A replica a reassignment took away, whose deletion a crash cut short after the
    .meta file stopped naming it: its directory holds what a replicated log writes (the
    leader-epoch checkpoint, an aborted-transactions index, their temporaries), and the
    next start removes it all the same."""
    from chronik.storage.partition_log import PartitionLog

    catalog = Catalog(tmp_path)
    catalog.load()
    run_steps(catalog.ensure_replicas_steps("t", uuid.uuid4(), 2, [0, 1], {}))
    plog = catalog.get("t").log(1)
    plog.epochs.assign(3, plog.end_offset)
    moved = tmp_path / "t-1"
    for name in ("00000000000000000000.txnindex", "leader-epoch-checkpoint.tmp"):
        (moved / name).write_bytes(b"")
    assert (moved / "leader-epoch-checkpoint").exists()
    monkeypatch.setattr(PartitionLog, "delete", lambda self: None)  # the crash
    assert catalog.remove_replicas("t", [1]) == [1]
    monkeypatch.undo()
    catalog.close()

    again = Catalog(tmp_path)
    again.load()
    assert [p is not None for p in again.get("t").partitions] == [True, False]
    assert not moved.exists()
    assert (tmp_path / "t-0").exists()
    again.close()


def test_a_directory_holding_foreign_files_is_left_alone(tmp_path):
    """A directory named like a partition but holding files no log writes is not the
    broker's to remove."""
    catalog = Catalog(tmp_path)
    catalog.load()
    run_steps(catalog.ensure_replicas_steps("t", uuid.uuid4(), 2, [0], {}))
    catalog.close()
    stranger = tmp_path / "t-1"
    stranger.mkdir()
    (stranger / "00000000000000000000.log").write_bytes(b"")
    (stranger / "notes.txt").write_text("mine")
    again = Catalog(tmp_path)
    again.load()
    assert (stranger / "notes.txt").exists()
    again.close()
