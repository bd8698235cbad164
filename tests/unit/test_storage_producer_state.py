"""Idempotent producer checks, and their survival across restarts."""
from __future__ import annotations

import pytest
from test_storage_support import all_records, append, client_batch, open_log

from chronik.storage.errors import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerStateError,
)


def test_duplicate_returns_original_offsets_and_appends_nothing(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(3, pid=1, epoch=0, seq=0))
    second = append(log, client_batch(2, pid=1, epoch=0, seq=3))
    end, size = log.end_offset, log.size_bytes
    again = append(log, client_batch(2, pid=1, epoch=0, seq=3))
    assert again.duplicate and (again.base_offset, again.last_offset) == (3, 4)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert (log.end_offset, log.size_bytes) == (end, size)
    older = append(log, client_batch(3, pid=1, epoch=0, seq=0))  # within the last 5
    assert older.duplicate and older.base_offset == 0


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(6):
        append(log, client_batch(1, pid=1, epoch=0, seq=i))
    with pytest.raises(ProducerStateError) as info:
        append(log, client_batch(1, pid=1, epoch=0, seq=0))
    assert info.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, client_batch(1, pid=1, epoch=0, seq=1)).duplicate


def test_gap_in_sequence_is_out_of_order(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(2, pid=1, epoch=0, seq=0))
    with pytest.raises(ProducerStateError) as info:
        append(log, client_batch(1, pid=1, epoch=0, seq=5))
    assert info.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.end_offset == 2


def test_fenced_epoch_and_new_epoch_rules(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(1, pid=1, epoch=3, seq=0))
    with pytest.raises(ProducerStateError) as info:
        append(log, client_batch(1, pid=1, epoch=2, seq=1))
    assert info.value.code == INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as info:
        append(log, client_batch(1, pid=1, epoch=4, seq=7))
    assert info.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert not append(log, client_batch(1, pid=1, epoch=4, seq=0)).duplicate
    with pytest.raises(ProducerStateError):
        append(log, client_batch(1, pid=1, epoch=3, seq=1))


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert append(log, client_batch(1, pid=9, epoch=0, seq=42)).base_offset == 0
    assert append(log, client_batch(1, pid=9, epoch=0, seq=43)).base_offset == 1


def test_sequence_wraps_at_int32_max(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(2, pid=1, epoch=0, seq=2**31 - 2))
    assert append(log, client_batch(1, pid=1, epoch=0, seq=0)).base_offset == 2


def test_non_idempotent_batches_are_not_checked(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(1))
    assert append(log, client_batch(1)).base_offset == 1


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_restart(tmp_path, clean):
    path = tmp_path / "t-0"
    log = open_log(path)
    for i in range(30):  # rolls several segments: snapshots at each roll
        append(log, client_batch(2, pid=7, epoch=1, seq=2 * i))
    if clean:
        log.close()
    else:
        for seg in log.segments:
            seg.close()
    again = open_log(path)
    dup = append(again, client_batch(2, pid=7, epoch=1, seq=58))
    assert dup.duplicate and dup.base_offset == 58
    with pytest.raises(ProducerStateError):
        append(again, client_batch(1, pid=7, epoch=1, seq=61))
    with pytest.raises(ProducerStateError):
        append(again, client_batch(1, pid=7, epoch=0, seq=60))
    assert append(again, client_batch(1, pid=7, epoch=1, seq=60)).base_offset == 60
    assert len(all_records(again)) == 61


def test_state_without_any_snapshot_is_rebuilt_from_the_log(tmp_path):
    path = tmp_path / "t-0"
    log = open_log(path)
    for i in range(30):
        append(log, client_batch(2, pid=7, epoch=1, seq=2 * i))
    log.close()
    for snap in path.glob("*.snapshot"):
        snap.unlink()
    again = open_log(path)
    assert append(again, client_batch(2, pid=7, epoch=1, seq=58)).duplicate


def test_idle_producers_expire(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, client_batch(1, pid=1, epoch=0, seq=0), now=1000)
    log.apply_retention(1000 + log.config.producer_id_expiration_ms)
    # forgotten: any sequence is accepted again
    assert not append(log, client_batch(1, pid=1, epoch=0, seq=9)).duplicate
