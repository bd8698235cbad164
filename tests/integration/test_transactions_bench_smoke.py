"""The transactions bench runs end to end in quick mode: idempotent and transactional
produce, read_uncommitted and read_committed consume on one broker.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "transactions_bench.py"


def test_quick_transactions_bench_reports_ratios(tmp_path: Path) -> None:
    output = tmp_path / "transactions-bench.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["mode"] == "quick"
    for key in ("idempotent", "transactional", "read_uncommitted", "read_committed"):
        assert report["records_per_s"][key] > 0, key
    assert all(r > 0 for r in report["ratios"].values())
    assert "100 per transaction" in run.stdout
