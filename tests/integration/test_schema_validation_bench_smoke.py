"""The schema validation bench runs end to end in quick mode: the same Avro-framed records
to a plain topic and to a validated one on one broker serving the registry.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import run_quick_bench

pytestmark = pytest.mark.slow


def test_quick_schema_validation_bench_reports_ratios(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "schema_validation_bench.py", tmp_path / "schema-validation-bench.json", timeout=180
    )
    assert report["mode"] == "quick"
    for topic in ("bench-plain", "bench-validated"):
        assert report["best"][topic]["records_per_s"] > 0, topic
        assert report["best"][topic]["cpu_us_per_record"] > 0, topic
    assert report["ratio_records_per_s"] > 0 and report["ratio_cpu_per_record"] > 0
    assert "validated/plain" in printed
