"""The partition move bench runs end to end in quick mode: a ZooKeeper, three chronik
brokers filled with skewed topics, two more joining, then `chronik cluster rebalance` and
Kafka's generated plan (`partitions reassign --generate/--execute/--verify`) from the
same starting assignment.

Only completion and figures that hold whatever the machine's speed are asserted: both
plans copy at least the least any balancing plan must move, the bytes copied are those
planned, and the rebalance leaves the replica counts within one of each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_quick_partition_move_bench_reports_both_plans(tmp_path: Path) -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    report, printed = run_quick_bench(
        "partition_move_bench.py", tmp_path / "partition-move-bench.json", timeout=450
    )
    assert report["mode"] == "quick"
    results = report["results"]
    assert "error" not in results, results
    minimum = results["minimum_bytes"]
    assert 0 < minimum <= results["dry_run"]["planned_bytes"] <= results["replica_bytes"]
    for plan in ("chronik", "kafka"):
        row = results["plans"][plan]
        assert "error" not in row, (plan, row)
        assert row["moved_bytes"] >= minimum, (plan, row["moved_bytes"], minimum)
        assert row["moved_bytes"] == row["planned_bytes"], (plan, row)
        assert row["moved_over_minimum"] >= 1.0
        assert row["seconds"] > 0 and row["replicas_moved"] > 0
        assert len(row["replicas_per_broker"]) == 5 and min(row["replicas_per_broker"]) > 0
    assert results["plans"]["chronik"]["replica_spread"] <= 1
    assert "copied / minimum" in printed
