"""The event store schema bench runs end to end in quick mode: appends naming an Avro and
a JSON Schema subject and decoded reads against plain JSON values, on one broker.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

from .helpers import run_quick_bench


def test_quick_eventstore_schema_bench_reports_ratios(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "eventstore_schema_bench.py", tmp_path / "eventstore-schema-bench.json", timeout=180
    )
    assert report["mode"] == "quick"
    for figures in ("append_events_per_s", "read_events_per_s", "append_over_plain"):
        assert set(report[figures]) == {"plain", "avro", "json"}
        assert all(value > 0 for value in report[figures].values()), figures
    assert report["append_over_plain"]["plain"] == 1.0
    assert "append, Avro subject" in printed and "decode" in printed
