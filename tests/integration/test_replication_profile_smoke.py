"""profile_replication.py and fsync_probe.py run end to end in quick mode: a ZooKeeper and
three chronik brokers, CPU per record on the leader and the followers, latency alone; and
the disk's fsync timings.

Only completion and figures that could not be absent are asserted, never speed.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .helpers import REPO


def _run(script: str, timeout: float) -> str:
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick"],
        capture_output=True, text=True, timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_quick_replication_profile_reports_cpu_per_record() -> None:
    if zookeeper_classpath() is None:
        pytest.skip("Apache ZooKeeper is not installed (Debian package `zookeeper`)")
    printed = _run("profile_replication.py", 360)
    match = re.search(r"leader us/rec RF1 ([\d.]+) RF3 ([\d.]+)\s+follower us/rec ([\d.]+)",
                      printed)
    assert match, printed
    assert all(float(x) > 0 for x in match.groups()), printed
    assert re.search(r"alone: p50 RF1 [\d.]+ ms, RF3 [\d.]+ ms", printed), printed


@pytest.mark.timeout(120)
def test_quick_fsync_probe_times_fsyncs_and_writes() -> None:
    printed = _run("fsync_probe.py", 100)
    assert re.search(r"one at a time: +p50 [\d.]+", printed), printed
    assert re.search(r"per append @ \d+/s: p50 [\d.]+", printed), printed
    assert len(re.findall(r"appends beside fsyncs, [14] in flight: write\(\) p50", printed)) == 4
