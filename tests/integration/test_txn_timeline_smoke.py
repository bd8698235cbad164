"""The transaction timeline bench runs end to end in quick mode: a probed broker and a
transactional client, every step of a transaction found in the merged timeline.

Only completion and positive durations are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import run_quick_bench


def test_quick_timeline_splits_each_transaction_into_its_steps(tmp_path: Path) -> None:
    report, printed = run_quick_bench("txn_timeline.py", tmp_path / "timeline.json", timeout=180)
    assert report["mode"] == "quick"
    steps = report["steps"]["chronik"]
    for key in ("A", "B", "C", "D", "E", "F", "G", "total", "markers"):
        assert steps[key]["n"] > 0, key
        assert steps[key]["p50_us"] > 0, key
    # The steps follow each other: together they are the transaction.
    assert sum(steps[k]["mean_us"] for k in "ABCDEFG") == pytest.approx(
        steps["total"]["mean_us"], rel=0.01
    )
    assert "EndTxn answered" in printed
