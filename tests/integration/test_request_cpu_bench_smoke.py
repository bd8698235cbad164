"""The CPU-per-request bench runs end to end in quick mode, with its call count.

Only completion and non-zero figures are asserted, never speed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "request_cpu.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_request_cpu_bench_reports_cpu_and_calls_per_request() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--calls", "--top", "5"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    cpu = re.search(r"this +best CPU/request ([0-9.]+) us", out)
    assert cpu is not None and float(cpu.group(1)) > 0, out
    calls = re.search(r"this +Python calls per request ([0-9.]+)", out)
    # A Produce request takes at least the read, the decode, the append and the answer.
    assert calls is not None and float(calls.group(1)) > 20, out
