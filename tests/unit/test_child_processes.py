"""The processes tests start run as a production install would: without hypothesis,
which kio would otherwise import at every broker start."""

from __future__ import annotations

import subprocess
import sys


def test_a_child_process_imports_kio_without_hypothesis() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import kio.static._phantom as m; print(m.hypothesis)"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert out.stdout.strip() == "None"


def test_this_process_keeps_hypothesis() -> None:
    import hypothesis

    assert hypothesis.__version__
