"""The rolling restart bench runs end to end in quick mode: a ZooKeeper and three chronik
brokers, once with controlled shutdown and once without, one SIGTERM-restart each under
a steady idempotent acks=all producer.

Only completion, no delivery error and figures that are there are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_quick_rolling_restart_bench_reports_both_modes(tmp_path: Path) -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    report, printed = run_quick_bench(
        "rolling_restart_bench.py", tmp_path / "rolling-restart-bench.json", timeout=360
    )
    assert report["mode"] == "quick"
    for mode in ("on", "off"):
        row = report["results"][mode]
        assert "error" not in row, (mode, row)
        assert row["delivery_errors"] == 0 and row["records"] > 0, (mode, row)
        (restart,) = row["restarts"]
        assert restart["partitions_led"] > 0 and restart["records_in_window"] > 0
        assert 0 < restart["longest_ack_gap_s"] < 120
        assert restart["latency_p50_ms"] <= restart["latency_p99_ms"]
    assert "longest gap between acks" in printed
