"""Every chaos workload for ~20 s against a chaos cluster with no faults (one consumer
killed with kill -9 and restarted, as the workload does), then the final read and the
checker: no anomaly, and figures that show each workload ran. Needs root (network
namespaces) and ZooKeeper; skipped otherwise.

The seed is CHAOS_SEED when set, else random, and printed; a failed run is copied to
$CHAOS_SAVE_DIR (default /tmp/chronik-chaos-runs) and named in the failure, to be
checked again with ``python -m chaos.checker DIR`` (run from tests/).
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .cluster import ChaosCluster
from .net import usable
from .workload import Workload

RUN_SECONDS = 20.0


def skip_reason() -> str | None:
    why = usable()
    if why is not None:
        return why
    if zookeeper_classpath() is None or shutil.which("java") is None:
        return "ZooKeeper is not installed (scripts/install-test-deps.sh)"
    return None


def test_every_workload_without_faults_finds_no_anomaly(tmp_path: Path) -> None:
    why = skip_reason()
    if why is not None:
        pytest.skip(f"chaos workloads: {why}")
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 31))
    print(f"chaos seed {seed}, run in {tmp_path / 'run'}")
    cluster = ChaosCluster(tmp_path / "cluster")
    workload: Workload | None = None
    try:
        cluster.start()
        workload = Workload(cluster, tmp_path / "run", seed)
        workload.start()
        time.sleep(RUN_SECONDS / 2)
        workload.restart_consumer()
        time.sleep(RUN_SECONDS / 2)
        workload.stop()
        workload.final_read()
        report = workload.check()
        print(report.summary())
        if not report.ok:
            pytest.fail(f"seed {seed}: run saved in {workload.save()}\n{report.summary()}")
    except Exception as exc:
        if workload is not None:
            exc.add_note(f"seed {seed}: run saved in {workload.save()}")
        raise
    finally:
        if workload is not None:
            workload.close()
        cluster.close()

    f = report.figures
    assert f["acknowledged"] > 200 and f["acknowledged"] == f["sent"]
    assert (f["lost"], f["duplicated"], f["indeterminate"], f["failed"]) == (0, 0, 0, 0)
    # No fault: the longest wait for an acknowledgement is a scheduling hiccup, not an outage.
    assert 0 < f["longest_unavailability_s"] < 5.0
    assert f["group_queue"]["reads"] > 0 and f["group_queue"]["commits"] > 0
    assert f["group_queue"]["restarts"] == 1 and f["group_queue"]["poller_samples"] > 0
    assert f["group_txn"]["reads"] > 0
    # The groups were drained before their members stopped: every record was read.
    assert f["group_queue"]["unread"] == 0 and f["group_txn"]["unread"] == 0
    txns = f["transactions"]
    assert txns["committed"] > 0 and txns["aborted"] > 0 and txns["unknown"] == 0
    events = f["eventstore"]
    assert events["won"] > 0 and events["conflicts"] > 0 and events["indeterminate"] == 0
    assert f["replica_pairs_compared"] > 0
