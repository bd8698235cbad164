"""The chaos checker on synthetic runs written to disk as the workload writes them: a
clean run passes, and each injected anomaly is caught and named. No root, no network."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chronik.records.builder import Record, build_batch

from .checker import check, main
from .final_read import FINAL_DIR, STATE_FILE, pkey
from .history import HISTORY_DIR
from .report import Report
from .saved_run import write_meta

T0 = 1_800_000_000.0
Q, TX, EV = "q", "t", "e"
PARTITIONS = {Q: 2, TX: 2, EV: 1}
GROUP, TXN_GROUP = "g", "gt"
PID = 5


@dataclass
class Entry:
    """One batch of a synthetic log: a data record, or a transaction marker."""

    key: str | None
    value: str
    headers: tuple[tuple[str, bytes], ...] = ()
    txn: bool = False
    marker: bool = False
    visible: bool = True  # to a read_committed consumer
    epoch: int = 0


@dataclass
class Synth:
    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    logs: dict[tuple[str, int], list[Entry]] = field(default_factory=lambda: defaultdict(list))
    committed: dict[str, dict[str, int]] = field(default_factory=dict)
    # (topic, partition, broker) -> a change to that replica's batches.
    replica_edits: dict[tuple[str, int, int], Callable[[list[bytes]], list[bytes]]] = field(
        default_factory=dict)
    fetch_edits: dict[tuple[str, str], Callable[[list[dict]], list[dict]]] = field(
        default_factory=dict)
    state_edits: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (topic, partition, broker) whose replica file the final read did not take (a broker
    # outside the partition's replicas at the end).
    dropped_files: set[tuple[str, int, int]] = field(default_factory=set)
    clock: float = T0

    def at(self, dt: float = 0.01) -> float:
        self.clock += dt
        return round(self.clock, 6)

    def ev(self, worker: str, kind: str, type_: str, op: str, **fields: Any) -> dict[str, Any]:
        e = {"time": self.at(), "worker": worker, "kind": kind, "type": type_, "op": op, **fields}
        self.events[worker].append(e)
        return e

    def append(self, topic: str, p: int, entry: Entry) -> int:
        self.logs[(topic, p)].append(entry)
        return len(self.logs[(topic, p)]) - 1

    # -- what the workers do ---------------------------------------------------------------

    def send(self, worker: str, k: int, seq: int, outcome: str = "ok",
             written: bool = True) -> str:
        key, value, p = f"k{k}", f"{worker}-k{k}-{seq:06d}", k % PARTITIONS[Q]
        self.ev(worker, "producer", "invoke", "send", key=key, value=value, partition=p, gen=0)
        offset = self.append(Q, p, Entry(key, value)) if written else None
        if outcome == "ok":
            self.ev(worker, "producer", "ok", "send", value=value, partition=p, offset=offset)
        elif outcome in ("info", "fail"):
            self.ev(worker, "producer", outcome, "send", value=value, error="timed out")
        return value

    def read_all(self, worker: str, topic: str, p: int, upto: int | None = None) -> None:
        rows = [[p, o, e.key, e.value] for o, e in enumerate(self.logs[(topic, p)])
                if not e.marker and e.visible and (upto is None or o < upto)]
        self.ev(worker, "consumer", "ok", "read", records=rows)

    def commit(self, worker: str, offsets: dict[str, int]) -> None:
        invoked = self.ev(worker, "consumer", "invoke", "commit", offsets=offsets)["time"]
        self.ev(worker, "consumer", "ok", "commit", offsets=offsets, invoked=invoked)

    def poll(self, group: str, offsets: dict[str, int]) -> None:
        started = self.at()
        self.ev("poller", "poller", "ok", "committed", group=group, offsets=offsets,
                started=started)

    def txn(self, n: int, outcome: str) -> list[str]:
        records = [[p, f"t1-{n:06d}-{p}"] for p in range(PARTITIONS[TX])]
        decision = "commit" if outcome == "committed" else "abort"
        self.ev("t1", "txn", "invoke", "txn", txn=n, decision=decision, records=records)
        offsets = []
        for p, value in records:
            offsets.append([p, self.append(TX, p, Entry(f"t{n}", value, txn=True,
                                                         visible=outcome == "committed")), value])
        if decision == "commit":
            self.ev("t1", "txn", "invoke", "commit", txn=n)
        for p, _ in records:
            self.append(TX, p, Entry(None, decision, txn=True, marker=True, visible=False))
        type_ = {"committed": "ok", "aborted": "fail"}.get(outcome, "info")
        self.ev("t1", "txn", type_, "txn", txn=n, outcome=outcome, offsets=offsets)
        return [v for _, v in records]

    def es_append(self, worker: str, key: str, expected: int, seq: int, outcome: str,
                  actual: int | None = None, written: bool | None = None) -> str:
        value = f"{worker}-{key}-{seq:06d}"
        self.ev(worker, "eventstore", "invoke", "append", key=key, expected=expected,
                value=value)
        offset = None
        if written if written is not None else outcome == "ok":
            headers = ((("chronik-expected-version", str(expected).encode())),
                       ("chronik-version", str(expected).encode()))
            offset = self.append(EV, 0, Entry(key, value, headers))
        if outcome == "ok":
            self.ev(worker, "eventstore", "ok", "append", key=key, expected=expected,
                    value=value, partition=0, offset=offset)
        elif outcome == "fail":
            self.ev(worker, "eventstore", "fail", "append", key=key, expected=expected,
                    value=value, actual=actual, error=f"version conflict: actual {actual}")
        else:
            self.ev(worker, "eventstore", "info", "append", key=key, expected=expected,
                    value=value, error="timed out")
        return value

    # -- on disk ---------------------------------------------------------------------------

    def write(self, base: Path) -> Path:
        out = base / "run"
        (out / HISTORY_DIR).mkdir(parents=True)
        workers = [
            {"id": "p1", "kind": "producer", "topic": Q, "group": None},
            {"id": "c1", "kind": "consumer", "topic": Q, "group": GROUP},
            {"id": "t1", "kind": "txn", "topic": TX, "group": None},
            {"id": "r1", "kind": "consumer", "topic": TX, "group": TXN_GROUP},
            {"id": "e1", "kind": "eventstore", "topic": EV, "group": None},
            {"id": "e2", "kind": "eventstore", "topic": EV, "group": None},
        ]
        write_meta(out, {
            "seed": 1, "topics": {role: {"name": t, "partitions": PARTITIONS[t], "config": {}}
                                  for role, t in (("queue", Q), ("txn", TX), ("events", EV))},
            "groups": {"queue": GROUP, "txn": TXN_GROUP}, "workers": workers,
        })
        for worker, events in self.events.items():
            with open(out / HISTORY_DIR / f"{worker}.jsonl", "w") as f:
                for e in events:
                    f.write(json.dumps(e) + "\n")
        final = out / FINAL_DIR
        partitions: dict[str, Any] = {}
        fetched: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for topic, n in PARTITIONS.items():
            for p in range(n):
                log = self.logs[(topic, p)]
                key = pkey(topic, p)
                info = {"topic": topic, "partition": p, "leader": 1, "leader_epoch": 0,
                        "isr": [1, 2, 3], "replicas": [1, 2, 3], "full_isr": True,
                        "high_watermark": len(log), "last_stable_offset": len(log), "files": {},
                        **self.state_edits.get(key, {})}
                for broker in (1, 2, 3):
                    if (topic, p, broker) in self.dropped_files:
                        continue
                    batches = [self._batch(o, e) for o, e in enumerate(log)]
                    edit = self.replica_edits.get((topic, p, broker))
                    if edit is not None:
                        batches = edit(batches)
                    rel = f"replicas/{topic}-{p}/broker-{broker}.log"
                    (final / rel).parent.mkdir(parents=True, exist_ok=True)
                    (final / rel).write_bytes(b"".join(batches))
                    info["files"][str(broker)] = rel
                partitions[key] = info
                for o, e in enumerate(log):
                    if e.marker:
                        continue
                    row = {"partition": p, "offset": o, "key": e.key, "value": e.value,
                           "headers": [[k, v.decode()] for k, v in e.headers]}
                    fetched[(topic, "read_uncommitted")].append(row)
                    if topic == TX and e.visible:
                        fetched[(topic, "read_committed")].append(row)
        (final / "fetch").mkdir(parents=True, exist_ok=True)
        names: dict[str, list[str]] = defaultdict(list)
        for (topic, isolation), rows in fetched.items():
            edit = self.fetch_edits.get((topic, isolation))
            rows = edit(rows) if edit is not None else rows
            with open(final / "fetch" / f"{topic}.{isolation}.jsonl", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            names[topic].append(isolation)
        state = {"time": self.at(), "errors": [], "partitions": partitions,
                 "committed": self.committed, "fetched": names}
        (final / STATE_FILE).write_text(json.dumps(state))
        return out

    @staticmethod
    def _batch(offset: int, e: Entry) -> bytes:
        if e.marker:
            record = Record(0, b"\x00\x00\x00\x01" if e.value == "commit" else b"\x00\x00\x00\x00",
                            b"\x00\x00\x00\x00\x00\x00")
            return build_batch([record], base_offset=offset, producer_id=PID, producer_epoch=0,
                               transactional=True, control=True)
        record = Record(int(T0 * 1000), None if e.key is None else e.key.encode(),
                        e.value.encode(), e.headers)
        return build_batch([record], base_offset=offset, partition_leader_epoch=e.epoch,
                           producer_id=PID if e.txn else -1, producer_epoch=0 if e.txn else -1,
                           transactional=e.txn)


def clean() -> Synth:
    """A run where every promise holds: 13 sends (one unknown and written, one unknown
    and not), a consumer reading everything and committing, a committed and an aborted
    transaction seen by a read_committed reader, racing event-store appends."""
    s = Synth()
    s.ev("p1", "producer", "event", "start")
    seqs: dict[int, int] = defaultdict(int)
    for i in range(12):
        k = i % 4
        seqs[k] += 1
        s.send("p1", k, seqs[k])
    s.send("p1", 1, 90, outcome="info", written=True)
    s.send("p1", 2, 91, outcome="info", written=False)
    s.ev("c1", "consumer", "event", "start", isolation="read_uncommitted")
    s.poll(GROUP, {})
    for p in range(PARTITIONS[Q]):
        s.read_all("c1", Q, p)
    ends = {str(p): len(s.logs[(Q, p)]) for p in range(PARTITIONS[Q])}
    s.commit("c1", ends)
    s.poll(GROUP, {pkey(Q, int(p)): o for p, o in ends.items()})
    s.committed[GROUP] = {pkey(Q, int(p)): o for p, o in ends.items()}

    s.txn(1, "committed")
    s.txn(2, "aborted")
    s.ev("r1", "consumer", "event", "start", isolation="read_committed")
    for p in range(PARTITIONS[TX]):
        s.read_all("r1", TX, p, upto=1)
    s.commit("r1", {"0": 1, "1": 1})
    s.committed[TXN_GROUP] = {pkey(TX, 0): 1, pkey(TX, 1): 1}

    s.es_append("e1", "acct-0", 0, 1, "ok")
    s.es_append("e2", "acct-0", 0, 1, "fail", actual=1)
    s.es_append("e2", "acct-0", 1, 2, "ok")
    s.es_append("e1", "acct-1", 0, 2, "info", written=True)
    s.es_append("e2", "acct-1", 0, 3, "fail", actual=1)
    s.es_append("e1", "acct-2", 0, 4, "info", written=False)
    return s


def run_check(s: Synth, tmp_path: Path) -> Report:
    return check(s.write(tmp_path))


def only(report: Report, kind: str) -> list[str]:
    return [a.message for a in report.anomalies if a.kind == kind]


def test_a_clean_run_passes_with_its_figures(tmp_path: Path) -> None:
    report = run_check(clean(), tmp_path)
    assert report.ok, report.summary()
    f = report.figures
    assert (f["sent"], f["acknowledged"], f["lost"], f["duplicated"]) == (14, 12, 0, 0)
    assert (f["indeterminate"], f["indeterminate_written"]) == (2, 1)
    assert f["transactions"]["committed"] == 1 and f["transactions"]["aborted"] == 1
    assert f["eventstore"]["won"] == 2 and f["eventstore"]["conflicts"] == 2
    assert f["eventstore"]["indeterminate"] == 2 and f["eventstore"]["indeterminate_written"] == 1
    assert f["replica_pairs_compared"] == 2 * 5
    assert set(f["unavailability_s"]) == {"q/0", "q/1"}


def test_an_acknowledged_record_missing_on_one_replica_is_lost(tmp_path: Path) -> None:
    s = clean()
    s.replica_edits[(Q, 0, 2)] = lambda batches: batches[:2] + batches[3:]
    report = run_check(s, tmp_path)
    lost = only(report, "lost")
    value = s.logs[(Q, 0)][2].value
    assert len(lost) == 1 and repr(value) in lost[0] and "broker 2" in lost[0], lost
    assert only(report, "replica-gap") and only(report, "replica-divergence")
    assert report.figures["lost"] == 1


def test_a_replica_short_of_the_high_watermark(tmp_path: Path) -> None:
    s = clean()
    s.replica_edits[(Q, 1, 3)] = lambda batches: batches[:-1]
    report = run_check(s, tmp_path)
    assert any("broker 3" in m for m in only(report, "replica-short")), report.summary()


def test_replicas_differing_below_the_high_watermark(tmp_path: Path) -> None:
    s = clean()
    epoch_1 = Entry(s.logs[(Q, 0)][0].key, s.logs[(Q, 0)][0].value, epoch=1)
    s.replica_edits[(Q, 0, 3)] = lambda b: [Synth._batch(0, epoch_1), *b[1:]]
    report = run_check(s, tmp_path)
    divergence = only(report, "replica-divergence")
    assert len(divergence) == 1 and "broker 3" in divergence[0] and "epoch 1" in divergence[0]
    assert report.kinds().keys() == {"replica-divergence"}


def test_a_duplicated_value(tmp_path: Path) -> None:
    s = clean()
    first = s.logs[(Q, 0)][0]
    s.append(Q, 0, Entry(first.key, first.value))
    report = run_check(s, tmp_path)
    assert any(repr(first.value) in m for m in only(report, "duplicate")), report.summary()
    assert report.figures["duplicated"] == 1


def test_an_acknowledged_record_at_another_offset(tmp_path: Path) -> None:
    s = clean()
    ok = next(e for e in s.events["p1"] if e["type"] == "ok" and e["partition"] == 1)
    ok["offset"] += 1
    report = run_check(s, tmp_path)
    assert any(repr(ok["value"]) in m for m in only(report, "offset")), report.summary()


def test_a_key_out_of_send_order(tmp_path: Path) -> None:
    s = clean()
    log = s.logs[(Q, 0)]
    # k0's first two values swap places, and their acknowledgements say so.
    a, b = [i for i, e in enumerate(log) if e.key == "k0"][:2]
    log[a], log[b] = log[b], log[a]
    for e in s.events["p1"]:
        if e["type"] == "ok" and e["value"] in (log[a].value, log[b].value):
            e["offset"] = a if e["value"] == log[a].value else b
    for e in s.events["c1"]:
        for row in e.get("records", []):
            if row[0] == 0 and row[1] in (a, b):
                row[3] = log[row[1]].value
    report = run_check(s, tmp_path)
    assert report.kinds().keys() == {"order"}, report.summary()
    assert repr(log[b].value) in only(report, "order")[0]


def test_a_record_nobody_sent_and_a_failed_send_written(tmp_path: Path) -> None:
    s = clean()
    s.append(Q, 1, Entry("k1", "p9-k1-000001"))
    failed = s.send("p1", 3, 77, outcome="fail", written=True)
    report = run_check(s, tmp_path)
    assert any("'p9-k1-000001'" in m for m in only(report, "unexpected")), report.summary()
    assert any(repr(failed) in m for m in only(report, "failed-written"))


def test_a_leader_serving_other_records_than_its_file(tmp_path: Path) -> None:
    s = clean()

    def change(rows: list[dict]) -> list[dict]:
        rows = [dict(r) for r in rows]
        rows[0]["value"] = "tampered"
        return rows

    s.fetch_edits[(Q, "read_uncommitted")] = change
    report = run_check(s, tmp_path)
    assert any("'tampered'" in m for m in only(report, "fetch")), report.summary()


def test_a_partition_without_its_full_isr(tmp_path: Path) -> None:
    s = clean()
    s.state_edits[pkey(Q, 0)] = {"isr": [1, 2], "full_isr": False}
    report = run_check(s, tmp_path)
    assert any("q/0" in m and "[1, 2]" in m for m in only(report, "isr")), report.summary()


def test_a_copy_left_on_a_broker_a_reassignment_took_the_partition_from(
        tmp_path: Path) -> None:
    s = clean()
    s.state_edits[pkey(Q, 1)] = {"orphans": [4]}
    report = run_check(s, tmp_path)
    orphans = only(report, "replica-orphan")
    assert len(orphans) == 1 and "q/1" in orphans[0] and "broker 4" in orphans[0], orphans
    assert report.kinds().keys() == {"replica-orphan"}


def test_a_copy_kept_while_a_reassignment_held_the_replica_off(tmp_path: Path) -> None:
    s = clean()
    s.ev("harness", "harness", "event", "stale-copy", partition="q/0", broker=3, waited=20.0)
    report = run_check(s, tmp_path)
    orphans = only(report, "replica-orphan")
    assert len(orphans) == 1 and "q/0" in orphans[0] and "broker 3" in orphans[0], orphans


def test_a_reassignment_still_in_progress_after_healing(tmp_path: Path) -> None:
    s = clean()
    s.state_edits[pkey(Q, 0)] = {"replicas": [1, 2, 3, 4], "adding": [4], "removing": [1]}
    report = run_check(s, tmp_path)
    moving = only(report, "reassignment")
    assert len(moving) == 1 and "adding [4]" in moving[0] and "removing [1]" in moving[0]


def test_a_replica_a_reassignment_removed_is_not_expected(tmp_path: Path) -> None:
    """Broker 3 left the partition's replicas: what its old copy held is no replica."""
    s = clean()
    s.state_edits[pkey(Q, 0)] = {"replicas": [1, 2], "isr": [1, 2], "adding": [],
                                 "removing": [], "orphans": []}
    s.dropped_files.add((Q, 0, 3))
    report = run_check(s, tmp_path)
    assert report.ok, report.summary()
    assert report.figures["replica_pairs_compared"] == 2 * 5 - 1


def test_a_read_of_something_the_log_does_not_hold(tmp_path: Path) -> None:
    s = clean()
    s.ev("c1", "consumer", "ok", "read", records=[[0, 1, "k2", "p1-k2-999999"]])
    report = run_check(s, tmp_path)
    read = only(report, "read")
    assert len(read) == 1 and "'p1-k2-999999'" in read[0] and "offset 1" in read[0]


def test_committed_offsets_going_backwards(tmp_path: Path) -> None:
    s = clean()
    s.poll(GROUP, {pkey(Q, 0): 1, pkey(Q, 1): len(s.logs[(Q, 1)])})
    report = run_check(s, tmp_path)
    backwards = only(report, "commit-backwards")
    assert any("q/0" in m and "back to 1" in m for m in backwards), report.summary()
    # The same step back is allowed when a timed-out commit carried that offset.
    s2 = clean()
    s2.ev("c1", "consumer", "invoke", "commit", offsets={"0": 1})
    s2.ev("c1", "consumer", "info", "commit", offsets={"0": 1}, error="timed out")
    s2.poll(GROUP, {pkey(Q, 0): 1, pkey(Q, 1): len(s2.logs[(Q, 1)])})
    report2 = run_check(s2, tmp_path / "again")
    assert not only(report2, "commit-backwards") and report2.notes


def test_a_poll_after_an_acknowledged_commit_answering_less(tmp_path: Path) -> None:
    s = clean()
    s.ev("poller", "poller", "ok", "committed", group=GROUP, coordinator=2,
         offsets={pkey(Q, 0): 2, pkey(Q, 1): len(s.logs[(Q, 1)])}, started=s.at())
    report = run_check(s, tmp_path)
    stale = only(report, "stale-offset")
    assert any("q/0" in m and "broker 2" in m and "answered 2" in m for m in stale), stale


def test_records_landing_after_the_final_snapshot_are_left_out(tmp_path: Path) -> None:
    s = clean()
    late = {"partition": 1, "offset": len(s.logs[(Q, 1)]), "key": "k1",
            "value": "p1-k1-000090", "headers": []}
    s.fetch_edits[(Q, "read_uncommitted")] = lambda rows: [*rows, late]
    report = run_check(s, tmp_path)
    assert report.ok, report.summary()


def test_an_acknowledged_commit_lost(tmp_path: Path) -> None:
    s = clean()
    s.committed[GROUP][pkey(Q, 1)] = 2
    report = run_check(s, tmp_path)
    assert any("q/1" in m and "committed offset 2" in m for m in only(report, "commit-lost"))


def test_a_later_commit_carrying_a_lower_offset(tmp_path: Path) -> None:
    s = clean()
    s.commit("c1", {"0": 1})
    report = run_check(s, tmp_path)
    assert any("committed 1" in m for m in only(report, "commit-backwards")), report.summary()


def test_records_below_the_committed_offset_nobody_read(tmp_path: Path) -> None:
    s = clean()
    s.events["c1"] = [e for e in s.events["c1"]
                      if not (e["op"] == "read" and e["records"] and e["records"][0][0] == 1)]
    report = run_check(s, tmp_path)
    skipped = only(report, "skipped")
    assert len(skipped) == 1 and "q/1" in skipped[0], report.summary()


def test_read_committed_seeing_an_aborted_or_unfinished_transaction(tmp_path: Path) -> None:
    s = clean()
    aborted = next(e for e in s.logs[(TX, 0)] if e.value == "t1-000002-0")
    s.ev("r1", "consumer", "ok", "read", records=[[0, 2, aborted.key, aborted.value]])
    early = s.txn(3, "committed")
    # The read is stamped before the commit was asked for.
    commit_asked = next(e for e in s.events["t1"] if e["op"] == "commit" and e["txn"] == 3)
    s.events["r1"].append({"time": commit_asked["time"] - 0.001, "worker": "r1",
                           "kind": "consumer", "type": "ok", "op": "read",
                           "records": [[0, 4, "t3", early[0]]]})
    report = run_check(s, tmp_path)
    assert any("'t1-000002-0'" in m for m in only(report, "aborted-read")), report.summary()
    assert any(repr(early[0]) in m for m in only(report, "uncommitted-read"))


def test_committed_transactions_whole_and_aborted_ones_invisible(tmp_path: Path) -> None:
    s = clean()

    def change(rows: list[dict]) -> list[dict]:
        kept = [r for r in rows if r["value"] != "t1-000001-1"]
        aborted = {"partition": 0, "offset": 2, "key": "t2", "value": "t1-000002-0",
                   "headers": []}
        return [*kept, aborted]

    s.fetch_edits[(TX, "read_committed")] = change
    report = run_check(s, tmp_path)
    assert any("txn 1" in m and "t1-000001-1" in m for m in only(report, "txn-partial"))
    assert any("txn 2" in m for m in only(report, "aborted-visible")), report.summary()


def test_a_transaction_of_unknown_outcome_seen_in_part(tmp_path: Path) -> None:
    s = clean()
    values = s.txn(3, "unknown")
    for p in range(PARTITIONS[TX]):
        for e in s.logs[(TX, p)]:
            if e.value in values:
                e.visible = e.value == values[0]
    report = run_check(s, tmp_path)
    partial = only(report, "txn-partial")
    assert len(partial) == 1 and "txn 3" in partial[0], report.summary()
    assert report.figures["transactions"]["unknown"] == 1


def test_a_version_won_twice_and_a_gap(tmp_path: Path) -> None:
    s = clean()
    # e2 told it won acct-0's version 1 as well: a second record stamped 1.
    twice = s.es_append("e2", "acct-0", 1, 9, "ok")
    report = run_check(s, tmp_path)
    assert any("version 1 of 'acct-0'" in m for m in only(report, "version-double-win"))
    assert any("'acct-0'" in m for m in only(report, "version-sequence")), report.summary()
    assert repr(twice) in "".join(only(report, "version-double-win"))


def test_versions_with_a_gap(tmp_path: Path) -> None:
    s = clean()
    s.es_append("e1", "acct-0", 3, 10, "ok")
    report = run_check(s, tmp_path)
    sequence = only(report, "version-sequence")
    assert len(sequence) == 1 and "3 at offset" in sequence[0], report.summary()


def test_a_refused_append_written(tmp_path: Path) -> None:
    s = clean()
    value = s.es_append("e2", "acct-0", 2, 11, "fail", actual=3, written=True)
    report = run_check(s, tmp_path)
    assert any(repr(value) in m for m in only(report, "failed-written")), report.summary()


def test_a_conflict_naming_the_expected_version(tmp_path: Path) -> None:
    s = clean()
    s.es_append("e1", "acct-0", 2, 12, "fail", actual=2)
    report = run_check(s, tmp_path)
    assert len(only(report, "conflict")) == 1, report.summary()


def test_an_acknowledged_append_lost(tmp_path: Path) -> None:
    s = clean()
    s.logs[(EV, 0)].pop(1)
    report = run_check(s, tmp_path)
    assert any("'e2-acct-0-000002'" in m for m in only(report, "lost")), report.summary()


def test_unavailability_is_the_longest_gap_between_acknowledgements(tmp_path: Path) -> None:
    s = clean()
    # Nothing acknowledged on partition 1 for 5 s while p1 went on sending to partition 0.
    for i in range(10):
        s.clock += 0.5
        s.send("p1", 0, 500 + i)
    s.send("p1", 1, 600)
    report = run_check(s, tmp_path)
    assert report.ok, report.summary()
    assert report.figures["unavailability_s"]["q/1"] == pytest.approx(5.0, abs=0.6)
    assert report.figures["unavailability_s"]["q/0"] < 1.0
    assert report.figures["longest_unavailability_s"] == report.figures["unavailability_s"]["q/1"]


def test_a_torn_last_line_and_the_command_line(tmp_path: Path, capsys) -> None:
    out = clean().write(tmp_path)
    with open(out / HISTORY_DIR / "p1.jsonl", "a") as f:
        f.write('{"time": 1, "worker": "p1", "ty')
    assert main([str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["ok"]
    assert "OK: 0 anomalies" in capsys.readouterr().out


def test_no_final_read_is_an_anomaly(tmp_path: Path) -> None:
    out = clean().write(tmp_path)
    (out / FINAL_DIR / STATE_FILE).unlink()
    report = check(out)
    assert not report.ok and only(report, "final-read")
    assert main([str(out)]) == 1


def test_the_timeline_merges_every_history_in_time_order(tmp_path: Path) -> None:
    from .history import timeline

    out = clean().write(tmp_path)
    lines = list(timeline(out))
    seconds = [float(line.split()[0]) for line in lines]
    assert seconds == sorted(seconds) and seconds[0] == 0.0
    assert {line.split()[1] for line in lines} >= {"p1", "c1", "t1", "r1", "e1", "e2", "poller"}
    assert all(line.split()[1] == "e2" for line in timeline(out, ["e2"]))
