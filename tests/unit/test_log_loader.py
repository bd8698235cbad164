"""The seams PartitionLog is built from: recovery at open (log_loader) used without a
log, the saved log start (log_start), and key versioning held only while a topic opts in
(key_versioning)."""
from __future__ import annotations

from test_storage_support import NOW, append, client_batch, open_log, small_config

from chronik.storage import log_loader, log_start
from chronik.storage.leader_epoch import LeaderEpochCache
from chronik.storage.producer_state import ProducerStateManager


def _load(path):
    return log_loader.load(
        path,
        small_config(),
        ProducerStateManager(path),
        LeaderEpochCache(path),
        created=False,
        now_ms=NOW,
    )


def test_an_empty_directory_loads_as_one_empty_segment(tmp_path):
    path = tmp_path / "t-0"
    path.mkdir()
    loaded = _load(path)
    assert [s.base_offset for s in loaded.segments] == [0]
    assert (loaded.start_offset, loaded.end_offset, loaded.clean) == (0, 0, False)
    for seg in loaded.segments:
        seg.close()


def test_a_torn_tail_is_cut_and_the_marker_kept_until_forgotten(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    for _ in range(3):
        append(log, client_batch(2))
    assert log.close() is None
    marker = path / log_loader.CLEAN_SHUTDOWN
    loaded = _load(path)
    assert loaded.clean and loaded.end_offset == 6 and loaded.recovered_bytes_truncated == 0
    assert marker.exists()  # the open removes it only once everything else is loaded
    log_loader.forget_clean_shutdown(path)
    assert not marker.exists()
    active = loaded.segments[-1]
    for seg in loaded.segments:
        seg.close()
    with open(active.log_path, "r+b") as f:
        f.truncate(active.log_path.stat().st_size - 1)
    again = _load(path)
    assert not again.clean and again.end_offset == 4 and again.recovered_bytes_truncated > 0
    for seg in again.segments:
        seg.close()


def test_the_saved_log_start(tmp_path):
    assert log_start.read(tmp_path) is None
    log_start.write(tmp_path, 42)
    assert (tmp_path / log_start.FILE_NAME).read_text() == "42\n"
    assert log_start.read(tmp_path) == 42
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / log_start.FILE_NAME).write_text("not a number")
    assert log_start.read(tmp_path) == -1


def test_key_versioning_is_held_only_while_the_topic_opts_in(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.versioning is None and log.key_index is None and log.key_floor == 0
    assert log.key_counts_below(0, None, 10) == []
    log.update_config(small_config(key_versioning=True))
    assert log.versioning is not None and log.key_index is not None
    log.update_config(small_config())
    assert log.versioning is None and log.key_index is None
    log.close()
