"""Running `python -m chronik ...` as a subprocess, the way a user would."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    @property
    def error_lines(self) -> list[str]:
        return self.stderr.splitlines()


def chronik(
    *args: str, bootstrap: str | None = None, input: str | None = None, timeout: float = 60
) -> Result:
    cmd = [sys.executable, "-m", "chronik", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def ok(*args: str, bootstrap: str | None = None, input: str | None = None) -> Result:
    """Run a command that must succeed; show its stderr when it does not."""
    result = chronik(*args, bootstrap=bootstrap, input=input)
    assert result.returncode == 0, f"chronik {' '.join(args)} failed:\n{result.stderr}"
    return result


def popen(*args: str, bootstrap: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "chronik", *args, "--bootstrap-server", bootstrap]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
