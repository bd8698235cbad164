"""Checks of the transactions topic: a read_committed consumer never sees a record of an
aborted transaction, nor one of a transaction whose commit had not yet been asked for;
at the end it sees every committed transaction whole (each record once, at the offset
its delivery gave), no aborted one, and each transaction of unknown outcome all or
nothing; one producer's committed transactions are in its order in each partition; and
the log holds no transactional record twice."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .final_read import pkey
from .history import text
from .report import Report
from .saved_run import Run


@dataclass
class Txn:
    worker: str
    n: int
    records: list[tuple[int, str]]
    decision: str
    commit_asked: float | None = None
    outcome: str | None = None  # committed, aborted, unknown; None: no answer recorded
    offsets: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.worker} txn {self.n}"


def load_txns(run: Run) -> tuple[dict[tuple[str, int], Txn], dict[str, Txn]]:
    txns: dict[tuple[str, int], Txn] = {}
    owner: dict[str, Txn] = {}
    for worker, events in run.workers("txn").items():
        for e in events:
            op, type_ = e.get("op"), e.get("type")
            if op == "txn" and type_ == "invoke":
                t = Txn(worker, e["txn"], [(p, v) for p, v in e["records"]], e["decision"])
                txns[(worker, t.n)] = t
                for _, v in t.records:
                    owner[v] = t
            elif op == "commit" and type_ == "invoke" and (worker, e["txn"]) in txns:
                txns[(worker, e["txn"])].commit_asked = e["time"]
            elif op == "txn" and (worker, e["txn"]) in txns:
                t = txns[(worker, e["txn"])]
                t.outcome = e.get("outcome") or {"ok": "committed", "fail": "aborted"}.get(
                    type_, "unknown")
                t.offsets = [(p, o, v) for p, o, v in e.get("offsets", [])]
    return txns, owner


def check_txn(run: Run, report: Report) -> None:
    spec = run.topic("txn")
    if spec is None or run.final is None:
        return
    topic, partitions = spec
    txns, owner = load_txns(run)
    _check_live_reads(run, report, topic, owner)

    visible: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in run.final.rows(topic, "read_committed"):
        visible[r.value or ""].append((r.partition, r.offset))
    for value, where in visible.items():
        if value not in owner:
            report.add("unexpected", f"read_committed {topic} shows {value!r} at "
                                     f"{where[0]}, which no transaction wrote")
        if len(where) > 1:
            report.add("duplicate", f"read_committed {topic} shows {value!r} {len(where)} times: "
                                    f"{where}")

    logs = {p: {r.offset: text(r.value) for r in run.log(topic, p)} for p in range(partitions)}
    counts = {"committed": 0, "aborted": 0, "unknown": 0, "unknown_visible": 0}
    for t in txns.values():
        seen = [v for _, v in t.records if v in visible]
        outcome = t.outcome or "unknown"
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome == "committed":
            missing = [v for _, v in t.records if v not in visible]
            if missing:
                report.add("txn-partial", f"committed {t.name}: {len(missing)} of its "
                                          f"{len(t.records)} records not visible to "
                                          f"read_committed: {missing}")
            for p, o, v in t.offsets:
                if logs.get(p, {}).get(o) != v:
                    report.add("lost", f"committed {t.name}: {v!r} was delivered at "
                                       f"{pkey(topic, p)} offset {o}; the final log holds "
                                       f"{logs.get(p, {}).get(o)!r} there")
        elif outcome == "aborted":
            if seen:
                report.add("aborted-visible", f"aborted {t.name}: read_committed shows {seen}")
        else:
            if seen:
                counts["unknown_visible"] += 1
            if seen and len(seen) != len(t.records):
                report.add("txn-partial", f"{t.name} (outcome unknown): read_committed shows "
                                          f"{len(seen)} of its {len(t.records)} records: {seen}")
    _check_order(report, topic, txns, owner, run)
    _check_log_duplicates(report, topic, partitions, owner, run)
    report.figures["transactions"] = {**counts, "total": len(txns)}


def _check_live_reads(run: Run, report: Report, topic: str, owner: dict[str, Txn]) -> None:
    """What read_committed members of the readers' group saw while the run went on."""
    group = run.group("txn")
    if group is None:
        return
    for worker, events in run.consumers_of(group).items():
        isolation = next((e.get("isolation") for e in events if e.get("op") == "start"), None)
        if isolation != "read_committed":
            continue
        for e in events:
            if e.get("op") != "read" or e.get("type") != "ok":
                continue
            for p, offset, _, value in e["records"]:
                t = owner.get(value)
                where = f"{pkey(topic, p)} offset {offset}"
                if t is None:
                    report.add("unexpected", f"{worker} read {value!r} at {where}, which no "
                                             f"transaction wrote")
                elif t.outcome == "aborted":
                    report.add("aborted-read", f"{worker} (read_committed) read {value!r} of "
                                               f"aborted {t.name} at {where}")
                elif t.commit_asked is None or e["time"] < t.commit_asked:
                    asked = "was never asked for" if t.commit_asked is None else (
                        f"was asked for at {t.commit_asked:.3f}")
                    report.add("uncommitted-read",
                               f"{worker} (read_committed) read {value!r} of {t.name} at "
                               f"{where} at {e['time']:.3f}; its commit {asked}")


def _check_order(report: Report, topic: str, txns: dict[tuple[str, int], Txn],
                 owner: dict[str, Txn], run: Run) -> None:
    """One producer's transactions follow each other: in a partition, the records of
    its transaction n come before those of n+1."""
    assert run.final is not None
    last: dict[tuple[str, int], tuple[int, int, str]] = {}
    for r in run.final.rows(topic, "read_committed"):
        t = owner.get(r.value or "")
        if t is None:
            continue
        stream = (t.worker, r.partition)
        before = last.get(stream)
        if before is not None and before[0] > t.n:
            report.add("txn-order", f"{pkey(topic, r.partition)}: {r.value!r} of {t.name} at "
                                    f"offset {r.offset} comes after {before[2]!r} of txn "
                                    f"{before[0]} at offset {before[1]}")
        if before is None or t.n > before[0]:
            last[stream] = (t.n, r.offset, r.value or "")


def _check_log_duplicates(report: Report, topic: str, partitions: int,
                          owner: dict[str, Txn], run: Run) -> None:
    for p in range(partitions):
        where: dict[str, list[int]] = defaultdict(list)
        for r in run.log(topic, p):
            where[text(r.value) or ""].append(r.offset)
        for value, offsets in where.items():
            if len(offsets) > 1:
                report.add("duplicate", f"{value!r} {len(offsets)} times in the log of "
                                        f"{pkey(topic, p)}, at offsets {offsets}")
            elif value not in owner:
                report.add("unexpected", f"the log of {pkey(topic, p)} holds {value!r} at "
                                         f"offset {offsets[0]}, which no transaction wrote")
