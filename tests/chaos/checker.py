"""The checker of a chaos run: reads a run directory (chaos.saved_run: histories and the
final read) and reports every broken promise as a named anomaly, with the run's figures.

    python -m chaos.checker OUT_DIR     # prints the report, writes OUT_DIR/report.json,
                                        # exits 1 when an anomaly was found

(from tests/, or with tests/ on PYTHONPATH). It needs nothing but the directory, so a
saved run is checked again offline, with the checker as it is then; ``python -m
chaos.history OUT_DIR`` prints the run's events in time order.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from .check_events import check_events
from .check_group import check_group
from .check_producers import check_producers
from .check_replicas import check_replicas
from .check_txn import check_txn
from .history import text
from .report import Report
from .saved_run import Run

REPORT_FILE = "report.json"


def check(out_dir: Path | str) -> Report:
    run = Run.load(Path(out_dir))
    report = Report()
    report.figures["seed"] = run.meta.get("seed")
    _check_workers(run, report)
    check_replicas(run, report)
    if run.final is None:
        return report
    check_producers(run, report)
    queue = run.topic("queue")
    if queue is not None:
        topic, partitions = queue
        readable = {p: {r.offset: text(r.value) for r in run.log(topic, p)}
                    for p in range(partitions)}
        check_group(run, report, "queue", readable)
    txn = run.topic("txn")
    if txn is not None:
        committed: dict[int, dict[int, str | None]] = defaultdict(dict)
        for r in run.final.rows(txn[0], "read_committed"):
            committed[r.partition][r.offset] = r.value
        check_group(run, report, "txn", committed)
    check_txn(run, report)
    check_events(run, report)
    return report


def _check_workers(run: Run, report: Report) -> None:
    """A worker that died of an exception stopped exercising the cluster: the run is not
    to be trusted (a harness or client failure, named so it is not taken for a pass)."""
    for worker, events in sorted(run.histories.items()):
        for e in events:
            if e.get("op") == "crash":
                report.add("worker-crash", f"{worker}: {e.get('error', '').strip()[-400:]}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m chaos.checker OUT_DIR", file=sys.stderr)
        return 2
    report = check(args[0])
    report.save(Path(args[0]) / REPORT_FILE)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
