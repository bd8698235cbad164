"""A local Apache ZooKeeper server (Debian's `zookeeper` package) for development,
`make cluster`, the cluster tests and the cluster benchmark. Production clusters run
their own ensemble; chronik only needs its address (`zookeeper.connect`).

The server runs standalone from a zoo.cfg written into its data directory, with the
four-letter words `ruok` and `srvr` allowed so readiness can be checked.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CLASSPATH_CANDIDATES = (
    "/usr/share/java/zookeeper.jar",
    "/usr/share/zookeeper/zookeeper.jar",
)
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperUnavailable(RuntimeError):
    pass


def zookeeper_classpath() -> str | None:
    """The server's classpath, or None when the Debian package is not installed."""
    for jar in CLASSPATH_CANDIDATES:
        if os.path.exists(jar):
            return f"/etc/zookeeper/conf:{jar}" if os.path.isdir("/etc/zookeeper/conf") else jar
    return None


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


class ZooKeeperProcess:
    """One standalone ZooKeeper server on host:port with its data under `data_dir`."""

    def __init__(
        self, data_dir: Path, port: int, tick_ms: int = 500, host: str = "127.0.0.1"
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self, java: str, classpath: str, cfg: Path) -> list[str]:
        """The server's command line (a harness may wrap it, e.g. in a namespace)."""
        return [java, "-Xmx256m", "-cp", classpath, MAIN, str(cfg)]

    def start(self, timeout: float = 30.0) -> ZooKeeperProcess:
        classpath = zookeeper_classpath()
        java = shutil.which("java")
        if classpath is None or java is None:
            raise ZooKeeperUnavailable(
                "Apache ZooKeeper is not installed (Debian package `zookeeper`, and java)"
            )
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.command(java, classpath, cfg),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with {self.proc.returncode}; see {self.log_path}"
                )
            if ruok(self.host, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not answer on port {self.port} in {timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ZooKeeperProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
