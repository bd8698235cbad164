"""The transactions bench runs end to end in quick mode: idempotent and transactional
produce, read_uncommitted and read_committed consume on one broker.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

from .helpers import run_quick_bench


def test_quick_transactions_bench_reports_ratios(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "transactions_bench.py", tmp_path / "transactions-bench.json", timeout=180
    )
    assert report["mode"] == "quick"
    for key in ("idempotent", "transactional", "read_uncommitted", "read_committed"):
        assert report["records_per_s"][key] > 0, key
    assert all(r > 0 for r in report["ratios"].values())
    assert "100 per transaction" in printed
