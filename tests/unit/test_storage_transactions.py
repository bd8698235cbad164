"""The partition side of transactions: open transactions and the last stable offset,
markers, the aborted-transactions index, and their recovery."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import NOW, append, open_log, small_config

from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.records.control import ABORT, COMMIT, build_marker, read_marker
from chronik.records.reader import iter_batches
from chronik.storage.errors import INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ProducerStateError
from chronik.storage.producer_state import ProducerStateManager
from chronik.storage.txn_index import ENTRY_SIZE, AbortedTxn

HC = [HealthCheck.function_scoped_fixture]


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, key: bytes = b"k") -> bytearray:
    return bytearray(
        build_batch(
            [Record(NOW + i, key, b"v%d" % (seq + i)) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
    )


def test_a_marker_round_trips():
    batch = build_marker(7, 3, 11, True, NOW)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert read_marker(batch) == (COMMIT, 11)
    assert read_marker(build_marker(7, 3, 2, False, NOW)) == (ABORT, 2)


def test_the_lso_stops_at_the_first_open_transaction(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, bytearray(build_batch([Record(NOW, b"a", b"1")])))  # offset 0
    assert log.last_stable_offset == 1
    append(log, txn_batch(1, 0))  # 1-2
    append(log, txn_batch(2, 0))  # 3-4
    assert log.last_stable_offset == 1
    assert log.ongoing_transactions() == [(1, 1), (2, 3)]
    log.append_marker(1, 0, 0, True, NOW)  # 5
    assert log.last_stable_offset == 3
    log.append_marker(2, 0, 0, False, NOW)  # 6
    assert log.last_stable_offset == log.end_offset == 7
    assert log.ongoing_transactions() == []
    assert log.aborted_transactions(0, 7) == [(2, 3)]
    assert log.aborted_transactions(5, 7) == [(2, 3)]  # the marker is in range
    assert log.aborted_transactions(7, 9) == []
    assert log.aborted_transactions(0, 3) == []  # starts at 3: not below the bound


def test_markers_fence_older_epochs_and_plain_writes_in_a_transaction(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, txn_batch(1, 0, epoch=2))
    with pytest.raises(ProducerStateError) as err:
        append(
            log,
            bytearray(
                build_batch(
                    [Record(NOW, b"k", b"v")], producer_id=1, producer_epoch=2, base_sequence=2
                )
            ),
        )
    assert err.value.code == INVALID_TXN_STATE
    with pytest.raises(ProducerStateError) as err:
        log.append_marker(1, 1, 0, True, NOW)
    assert err.value.code == INVALID_PRODUCER_EPOCH
    # The coordinator's abort after fencing carries the bumped epoch.
    log.append_marker(1, 3, 0, False, NOW)
    with pytest.raises(ProducerStateError) as err:
        append(log, txn_batch(1, 2, epoch=2))
    assert err.value.code == INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize("clean", [True, False])
def test_transactions_survive_a_restart(tmp_path, clean):
    path = tmp_path / "t-0"
    log = open_log(path)
    seqs = {1: 0, 2: 0, 3: 0}
    for i in range(30):  # several segments (1500 bytes each)
        pid = 1 + i % 3
        append(log, txn_batch(pid, seq=seqs[pid]))
        seqs[pid] += 2
        if i % 3 == 2:
            log.append_marker(1, 0, 0, True, NOW)
            log.append_marker(2, 0, 0, False, NOW)
    append(log, txn_batch(9, 0))
    want_lso = log.last_stable_offset
    want_aborted = log.aborted_transactions(0, log.end_offset)
    assert len(log.segments) > 2 and want_aborted
    assert [pid for pid, _ in log.ongoing_transactions()] == [3, 9]
    assert want_lso == log.ongoing_transactions()[0][1] == 4
    if clean:
        log.close()
    else:
        log.flush()
        # A crash loses the active segment's index entries; the log holds the markers.
        log.active.txn_index.delete()
        for snap in path.glob("*.snapshot"):
            snap.unlink()
    again = open_log(path)
    assert again.last_stable_offset == want_lso
    assert again.ongoing_transactions() == log.ongoing_transactions()
    assert again.aborted_transactions(0, again.end_offset) == want_aborted
    again.append_marker(3, 0, 0, True, NOW)
    again.append_marker(9, 0, 0, True, NOW)
    assert again.last_stable_offset == again.end_offset


def test_truncation_forgets_the_aborts_and_reopens_the_transaction(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, txn_batch(1, 0))  # 0-1
    marker = log.append_marker(1, 0, 0, False, NOW).base_offset  # 2
    append(log, txn_batch(1, 2))  # 3-4
    assert log.aborted_transactions(0, 5) == [(1, 0)]
    log.truncate_to(marker)
    assert log.aborted_transactions(0, 5) == []
    assert log.last_stable_offset == 0  # the transaction is open again
    assert log.ongoing_transactions() == [(1, 0)]


def test_a_follower_learns_transactions_from_the_leaders_batches(tmp_path):
    leader = open_log(tmp_path / "l" / "t-0")
    append(leader, txn_batch(1, 0))
    append(leader, txn_batch(2, 0))
    leader.append_marker(1, 0, 5, False, NOW)
    follower = open_log(tmp_path / "f" / "t-0")
    follower.replicated = True
    follower.append_replicated(leader.read(0, 1 << 20), NOW)
    assert follower.ongoing_transactions() == [(2, 2)]
    assert follower.aborted_transactions(0, 10) == [(1, 0)]
    assert follower.producer_state.producers[1].coordinator_epoch == 5


def test_snapshots_carry_open_transactions_and_read_version_1(tmp_path):
    state = ProducerStateManager(tmp_path)
    state.update(read_header(txn_batch(4, 0)), 10, NOW)
    state.complete(5, 1, 3, 20, NOW, aborted=True)
    decoded = ProducerStateManager.decode(state.encode())
    assert decoded[4].current_txn_first_offset == 10
    assert decoded[5].coordinator_epoch == 3 and decoded[5].epoch == 1
    # A version 1 snapshot (before transactions): producer 4, epoch 0, no batches.
    import struct

    from crc32c import crc32c

    body = struct.pack(">i", 1) + struct.pack(">qhqb", 4, 0, NOW, 0)
    v1 = struct.pack(">4shI", b"CHPS", 1, crc32c(body)) + body
    old = ProducerStateManager.decode(v1)
    assert old[4].epoch == 0 and old[4].current_txn_first_offset == -1


def test_the_index_file_is_kafkas_format(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, txn_batch(3, 0))
    log.append_marker(3, 0, 0, False, NOW)
    files = list((tmp_path / "t-0").glob("*.txnindex"))
    assert len(files) == 1
    data = files[0].read_bytes()
    assert len(data) == ENTRY_SIZE
    import struct

    assert struct.unpack(">hqqqq", data) == (0, 3, 0, 2, 3)
    assert log.active.txn_index.entries == [AbortedTxn(3, 0, 2, 3)]


def test_compaction_drops_aborted_records_and_stops_at_open_transactions(tmp_path):
    log = open_log(tmp_path / "t-0", small_config(cleanup_policy="compact"))
    append(log, bytearray(build_batch([Record(NOW, b"k", b"committed")])))
    append(log, txn_batch(1, 0, n=1, key=b"k"))
    log.append_marker(1, 0, 0, False, NOW)
    for i in range(12):
        append(log, bytearray(build_batch([Record(NOW, b"x%d" % i, b"v" * 200)])))
    append(log, txn_batch(2, 0, n=1, key=b"x1"))  # open: nothing from here is cleaned
    for _ in range(12):
        append(log, bytearray(build_batch([Record(NOW, b"y", b"v" * 200)])))
    log.roll()
    log.compact(NOW)
    values = {}
    offset = log.start_offset
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        for pos, header in iter_batches(data):
            if not header.is_control:
                from chronik.records.reader import iter_records

                for rec in iter_records(bytes(data[pos : pos + header.size])):
                    values.setdefault(rec.key, []).append(rec.value)
            offset = header.last_offset + 1
    assert values[b"k"] == [b"committed"]
    assert len(values[b"x1"]) == 2  # the open transaction's record is not compacted


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(ops=st.lists(st.tuples(st.integers(1, 3), st.sampled_from("wca")), max_size=40))
def test_the_lso_is_the_oldest_open_transaction(tmp_path_factory, ops):
    log = open_log(tmp_path_factory.mktemp("p") / "t-0")
    seqs = {1: 0, 2: 0, 3: 0}
    first: dict[int, int] = {}
    aborted = []
    for pid, op in ops:
        if op == "w":
            result = append(log, txn_batch(pid, seqs[pid]))
            seqs[pid] += 2
            first.setdefault(pid, result.base_offset)
        else:
            marker = log.append_marker(pid, 0, 0, op == "c", NOW).base_offset
            start = first.pop(pid, marker)
            if op == "a":
                aborted.append((pid, start))
        want = min(first.values()) if first else log.end_offset
        assert log.last_stable_offset == want
    assert sorted(log.aborted_transactions(0, log.end_offset + 1)) == sorted(aborted)


def test_a_zero_filled_index_tail_is_not_read_as_an_aborted_transaction(tmp_path):
    """After a power loss a file that grew may end in zeros, which parse as version 0;
    no real entry has its last stable offset at or before its marker."""
    from chronik.storage.txn_index import TransactionIndex

    log = open_log(tmp_path / "t-0")
    append(log, txn_batch(3, 0))
    log.append_marker(3, 0, 0, False, NOW)
    (path,) = (tmp_path / "t-0").glob("*.txnindex")
    with open(path, "ab") as f:
        f.write(b"\0" * ENTRY_SIZE * 2)
    assert TransactionIndex(path).entries == [AbortedTxn(3, 0, 2, 3)]


def test_an_abort_with_no_data_on_the_partition_is_indexed_and_read_back(tmp_path):
    """A transaction that added the partition but wrote nothing there before its abort
    has its first offset at its marker; it and every entry after it survive a reopen
    (a check that took first == last for a torn entry hid the aborts after it from
    read_committed consumers)."""
    from chronik.storage.txn_index import TransactionIndex

    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    entries = [AbortedTxn(2002, 437, 437, 438), AbortedTxn(2002, 699, 700, 701)]
    for entry in entries:
        index.append(entry)
    assert TransactionIndex(index.path).entries == entries
