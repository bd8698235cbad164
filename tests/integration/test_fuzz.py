"""Fuzzing a live broker process, and replaying every crash the fuzzer ever found.

`test_fuzz_campaign` is a bounded, seeded run (FUZZ_SECONDS, FUZZ_FRAMES, FUZZ_SEED,
FUZZ_FINDINGS, FUZZ_SKIP, FUZZ_SKIP_APIS override it; `make fuzz` runs it for
longer). Each file in `fuzz_regressions/` holds frames that once crashed,
wedged or raised a traceback in the broker; replayed in order against a fresh
broker, they must leave it alive, answering, and without a traceback in its log.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from tests.conftest import BrokerProcess

from .fuzzing import (
    Settings,
    api_versions,
    prepare_topics,
    read_frames,
    run_campaign,
    send_frame,
)

REGRESSIONS = Path(__file__).parent / "fuzz_regressions"
# A fixed number of frames from a fixed seed (about 20 s on 2 cores), capped in time so a
# loaded machine runs fewer frames rather than past the test's timeout.
BOUNDED_FRAMES = 700
BOUNDED_SECONDS = 150
BOUNDED_SEED = 20240611


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fuzz_campaign(tmp_path: Path) -> None:
    settings = Settings.from_env(
        BOUNDED_SECONDS, BOUNDED_SEED, tmp_path / "findings", frames=BOUNDED_FRAMES
    )
    report = run_campaign(settings, tmp_path)
    print(report.summary())
    assert len(report.covered) == len(report.served) or settings.skip_apis, report.summary()
    assert report.ok, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fuzz_a_cluster_member(zookeeper, tmp_path: Path) -> None:
    """The same campaign, shorter, against a broker of a (one-broker) cluster, whose
    Metadata, admin and coordinator requests take the cluster's paths."""
    settings = Settings.from_env(
        BOUNDED_SECONDS // 2, BOUNDED_SEED + 1, tmp_path / "findings",
        frames=BOUNDED_FRAMES // 2,
    )
    config = {
        "zookeeper.connect": f"{zookeeper.connect}/fuzz-{tmp_path.name}",
        "broker.id": "1",
        "zookeeper.session.timeout.ms": "6000",
    }
    report = run_campaign(settings, tmp_path, config)
    print(report.summary())
    assert report.ok, report.summary()


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.hex")), ids=lambda p: p.stem)
def test_fuzz_regression(tmp_path: Path, path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        prepare_topics(broker.bootstrap)
        for data in read_frames(path):
            send_frame(broker.port, data, 2.0)
        assert broker.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            broker.proc.wait(1.0)  # a crash shows within a moment of its frame
        assert broker.proc.poll() is None, f"broker exited with {broker.proc.returncode}"
        assert api_versions(broker.port)
        prepare_topics(broker.bootstrap)  # still serves an admin request and creates files
        log = broker.log_text()
        assert "Traceback" not in log, log[log.index("Traceback") :][:3000]
    finally:
        broker.kill()


def test_regression_frames_are_replayable() -> None:
    files = sorted(REGRESSIONS.glob("*.hex"))
    assert files
    for path in files:
        frames = read_frames(path)
        assert frames, path
        for data in frames:
            assert int.from_bytes(data[:4], "big") == len(data) - 4, path
