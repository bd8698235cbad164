"""Java kafka-clients for the tests: where the jars are, and compiling a test program.

The jars come from $CHRONIK_KAFKA_JARS, else .cache/kafka-java, where
scripts/install-test-deps.sh puts them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JARS = Path(os.environ.get("CHRONIK_KAFKA_JARS", ROOT / ".cache" / "kafka-java"))
JAVA_TIMEOUT = 180

NEEDS_JAVA = [
    pytest.mark.skipif(
        shutil.which("javac") is None or shutil.which("java") is None, reason="no JDK installed"
    ),
    pytest.mark.skipif(
        not (JARS / "kafka-clients.jar").is_file(),
        reason=f"kafka-clients.jar not in {JARS} (scripts/install-test-deps.sh fetches it)",
    ),
]


def needs_java(test):
    """NEEDS_JAVA for one test of a module that mostly runs without Java."""
    for mark in NEEDS_JAVA:
        test = mark(test)
    return test


def compile_java(out: Path, source: Path) -> str:
    """Compile ``source`` into ``out`` against the jars; the classpath to run it with."""
    jars = os.pathsep.join(str(j) for j in sorted(JARS.glob("*.jar")))
    proc = subprocess.run(
        ["javac", "-d", str(out), "-cp", jars, str(source)],
        capture_output=True,
        timeout=JAVA_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return os.pathsep.join([str(out), jars])
