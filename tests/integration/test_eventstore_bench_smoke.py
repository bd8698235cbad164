"""The event store bench runs end to end in quick mode: reads by key over HTTP against a
consumer scan, conditional appends against plain produce, on one broker.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

from .helpers import run_quick_bench


def test_quick_eventstore_bench_reports_ratios(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "eventstore_bench.py", tmp_path / "eventstore-bench.json", timeout=180
    )
    assert report["mode"] == "quick"
    assert report["load"]["records"] == report["keys"] * report["events_per_key"]
    reads = report["reads"]
    for key in ("http_p50_ms", "http_p99_ms", "scan_p50_ms", "scan_p99_ms"):
        assert reads[key] > 0, key
    assert reads["http_p50_ms"] <= reads["http_p99_ms"]
    appends = report["appends"]
    assert appends["plain_records_per_s"] > 0 and appends["conditional_records_per_s"] > 0
    assert appends["conditional_over_plain"] > 0
    assert "conditional append" in printed
