"""Running `python -m chronik ...` as a subprocess, the way a user would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from .ports import free_port  # noqa: F401 - the CLI tests' ports come from here


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
    *args: str,
    bootstrap: str | None = None,
    input: str | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
) -> Result:
    """``env`` adds to (not replaces) the environment the command runs in."""
    cmd = [sys.executable, "-m", "chronik", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap-server", bootstrap]
    proc = subprocess.run(
        cmd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )
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


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chronik serve exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")
