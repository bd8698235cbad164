"""Shared fixtures: an embedded broker, and a real `chronik serve` process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from chronik.broker.embedded import EmbeddedBroker



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")


class BrokerProcess:
    """`python -m chronik serve` on a fixed data dir and port, restartable."""

    def __init__(
        self,
        data_dir: Path,
        config: Mapping[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.preexec = preexec  # runs in the child before exec, e.g. to set rlimits
        self.port = free_port()
        self.config = dict(config or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        cmd = [
            sys.executable,
            "-m",
            "chronik",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
        ]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec
        )
        log.close()
        wait_for_port(self.port, proc=self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def restart(self) -> BrokerProcess:
        self.terminate()
        return self.start()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    from chronik.broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(data_dir=tmp_path / "data")
    embedded.start()
    try:
        yield embedded
    finally:
        embedded.close()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[object]:
    """Start embedded brokers with custom settings: `broker_factory({"num.partitions": "3"})`."""
    started: list[EmbeddedBroker] = []

    def make(config: Mapping[str, str] | None = None, name: str = "data") -> EmbeddedBroker:
        from chronik.broker.embedded import EmbeddedBroker

        embedded = EmbeddedBroker(data_dir=tmp_path / name, config=config)
        started.append(embedded.start())
        return embedded

    yield make
    for embedded in started:
        embedded.close()


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def broker_process_factory(tmp_path: Path) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def make(config: Mapping[str, str] | None = None, name: str = "data") -> BrokerProcess:
        proc = BrokerProcess(tmp_path / name, config)
        started.append(proc.start())
        return proc

    yield make
    for proc in started:
        proc.kill()


os.environ.setdefault("CHRONIK_TESTING", "1")
