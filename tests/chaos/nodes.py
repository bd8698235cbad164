"""The processes of a chaos cluster, each in its node's namespace (chaos.net): one
ZooKeeper server and N `chronik serve` brokers, with what the harness does to them:
SIGSTOP/SIGCONT, kill -9 and restart, SIGTERM, a full disk, a clock jump.

Each broker's data directory may be a filesystem of its own (``disk_mb`` > 0: an ext4
image on a loop device, or a tmpfs where loop devices are missing), so one broker's disk
can be filled while the others write on; else it is a plain directory. Its log file
lives outside that filesystem.

An I/O error on a broker's disk comes from chaos/fsync_fault.c, preloaded into it:
fsync and fdatasync fail with EIO while a file exists (``fsync_fault``).

Clock jumps use libfaketime (Debian's `faketime`) preloaded into the broker with a
time file the harness rewrites. libfaketime 0.9.10 cannot leave the monotonic clock
alone under Python (time.sleep fails with EINVAL when it tries), so a jump moves both
clocks, as a suspended virtual machine sees on resume; only forward jumps are made,
since no real monotonic clock goes back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from chronik.cluster.zookeeper_process import ZooKeeperProcess

from .net import Network

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
BROKER_PORT = 9092
ZK_PORT = 2181


def faketime_available() -> bool:
    return os.path.exists(FAKETIME_LIB)


class ZooKeeperNode(ZooKeeperProcess):
    """ZooKeeper inside its node's namespace, on the node's address."""

    def __init__(self, net: Network, name: str, data_dir: Path, tick_ms: int = 500) -> None:
        super().__init__(data_dir, ZK_PORT, tick_ms=tick_ms, host=net.address(name))
        self.net = net
        self.name = name

    def command(self, java: str, classpath: str, cfg: Path) -> list[str]:
        return [*self.net.exec_prefix(self.name), *super().command(java, classpath, cfg)]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.resume()
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.kill()
        self.start()


class Disk:
    """A filesystem of ``size_mb`` mounted at ``mount``: ext4 on a loop device, else a
    tmpfs."""

    def __init__(self, image: Path, mount: Path, size_mb: int) -> None:
        self.image = image
        self.mount = mount
        self.size_mb = size_mb
        self.kind = ""
        self.filler = mount / "filler"

    def create(self) -> Disk:
        self.mount.mkdir(parents=True, exist_ok=True)
        if self.size_mb <= 0:
            self.kind = "dir"  # the host's filesystem: cannot be filled
            return self
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.size_mb << 20)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True,
                           capture_output=True)
            subprocess.run(["mount", "-o", "loop", str(self.image), str(self.mount)],
                           check=True, capture_output=True)
            self.kind = "ext4"
        except (OSError, subprocess.CalledProcessError):
            with contextlib.suppress(OSError):
                self.image.unlink()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs",
                            str(self.mount)], check=True, capture_output=True)
            self.kind = "tmpfs"
        return self

    def fill(self) -> None:
        """Write a filler file until the filesystem is full."""
        if self.kind == "dir":
            raise RuntimeError("this broker's data is not on a filesystem of its own")
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 20, 64 << 10, 4 << 10, 1):
                try:
                    while True:
                        f.write(chunk[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        with contextlib.suppress(OSError):
            os.sync()

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    @property
    def full(self) -> bool:
        return self.filler.exists()

    def destroy(self) -> None:
        """Unmount; an ext4 image stays (sparse) for a look afterwards:
        ``mount -o loop disk.img disk``."""
        if self.kind != "dir":
            subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True)


class BrokerNode:
    """`chronik serve` as broker ``broker_id`` inside node ``name``'s namespace."""

    def __init__(
        self,
        net: Network,
        name: str,
        broker_id: int,
        base: Path,
        config: Mapping[str, str],
        disk_mb: int = 0,
        faketime: bool = False,
    ) -> None:
        self.net = net
        self.name = name
        self.broker_id = broker_id
        self.base = base
        self.config = dict(config)
        self.disk = Disk(base / "disk.img", base / "disk", disk_mb)
        self.data_dir = self.disk.mount / "data"
        self.log_path = base / "broker.log"
        self.faketime = faketime and faketime_available()
        self.time_file = base / "faketime"
        self.clock_offset = 0.0
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0
        # Added to the environment of the next start (a preloaded fault library).
        self.env: dict[str, str] = {}

    @property
    def address(self) -> str:
        return self.net.address(self.name)

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{BROKER_PORT}"

    def setup(self) -> BrokerNode:
        self.base.mkdir(parents=True, exist_ok=True)
        self.disk.create()
        if self.faketime:
            self.time_file.write_text("+0\n")
        return self

    def start(self, wait: bool = True, timeout: float = 60.0) -> BrokerNode:
        cmd = [
            *self.net.exec_prefix(self.name),
            sys.executable, "-m", "chronik", "serve",
            "--data-dir", str(self.data_dir),
            "--listen", f"{self.address}:{BROKER_PORT}",
        ]
        for key, value in {**self.config, "broker.id": str(self.broker_id)}.items():
            cmd += ["--set", f"{key}={value}"]
        env = {**os.environ, **self.env}
        if self.faketime:
            env.update(
                LD_PRELOAD=FAKETIME_LIB,
                FAKETIME_TIMESTAMP_FILE=str(self.time_file),
                FAKETIME_NO_CACHE="0",
                FAKETIME_CACHE_DURATION="1",
            )
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.starts += 1
        self.paused = False
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"broker {self.broker_id} exited; see {self.log_path}")
            try:
                with socket.create_connection((self.address, BROKER_PORT), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"broker {self.broker_id} not listening after {timeout}s")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pause(self) -> None:
        if self.running and not self.paused:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """kill -9."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        self.paused = False

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM; the exit status, or None when it did not exit in time (then killed)."""
        if not self.running:
            return self.proc.returncode if self.proc is not None else None
        assert self.proc is not None
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def jump_clock(self, seconds: float) -> None:
        """Move the broker's clocks forward by ``seconds`` (libfaketime)."""
        if not self.faketime:
            raise RuntimeError("this broker runs without libfaketime")
        self.clock_offset += max(seconds, 0.0)
        tmp = self.time_file.with_suffix(".tmp")
        tmp.write_text(f"+{self.clock_offset:.0f}\n")
        tmp.replace(self.time_file)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def destroy(self) -> None:
        self.resume()
        self.kill()
        self.disk.destroy()


def fsync_fault_library(build_dir: Path) -> Path | None:
    """chaos/fsync_fault.c compiled into ``build_dir``, or None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = Path(__file__).with_name("fsync_fault.c")
    library = build_dir / "fsync_fault.so"
    build_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
    )
    return library if done.returncode == 0 else None


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
