"""The replication-throttle bench runs end to end in quick mode: a ZooKeeper and three
chronik brokers, one throttled catch-up and one unthrottled.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_throttle_bench_reports_achieved_over_configured(tmp_path: Path) -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    report, printed = run_quick_bench(
        "throttle_bench.py", tmp_path / "throttle-bench.json", timeout=280
    )
    assert report["mode"] == "quick"
    rows = report["results"]
    assert set(rows) == {"throttle 2 MB/s", "unthrottled"}
    for name, row in rows.items():
        assert "error" not in row, (name, row)
        assert row["backlog_bytes"] > 0 and row["overall_bytes_per_s"] > 0, (name, row)
    assert rows["throttle 2 MB/s"]["steady_ratio"] > 0
    assert "steady MB/s" in printed
