"""The replication bench runs end to end in quick mode: a ZooKeeper and three chronik
brokers, acks=all with replication factor 1 and 3, and one timed leader kill.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_quick_replication_bench_reports_ratio_and_failover(tmp_path: Path) -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    report, printed = run_quick_bench(
        "replication_bench.py", tmp_path / "replication-bench.json", timeout=360
    )
    assert report["mode"] == "quick"
    for rf in (1, 3):
        row = report["results"][f"rf-{rf}"]
        assert "error" not in row, (rf, row)
        assert row["failed"] == 0 and row["records_per_s"] > 0, (rf, row)
        assert 0 < row["latency_p50_ms"] <= row["latency_p99_ms"], (rf, row)
        assert sum(row["leaders_per_broker"].values()) == 12
    for key in ("records_per_s", "latency_p50_ms", "latency_p99_ms"):
        assert report["ratios_rf3_over_rf1"][key] > 0
    failover = report["failover"]
    assert "error" not in failover, failover
    (kill,) = failover["runs"]
    assert kill["new_leader"] not in (kill["victim"], -1)
    assert 0 < failover["median_s"] < 60
    assert "RF3/RF1" in printed
