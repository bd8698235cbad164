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
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from chronik.broker.embedded import EmbeddedBroker



# --- pytest-xdist: `make test` runs the suite in worker processes (-n, --dist loadgroup) --
#
# Which tests must share a worker, as the scheduler's groups ("scopes"), decided from the
# test's path alone: pytest 9.2 no longer lets xdist_group marks reach the scheduler
# (pytest-dev/pytest-xdist#1386), and the scheduler sees node ids, not fixtures.
# - tests/spark/: two groups, each with a Spark session (a 1 GB JVM) and a broker of its
#   own: the projection tests (their own Spark job too, killed and run again) and the
#   rest, each several minutes of the Spark JVM's CPU.
# - each file of tests/integration/: module-scoped clusters and brokers (cluster3, a
#   module's own fixture), Java programs compiled once per module, and tests that follow
#   on from the one before in the file, all as in a serial run.
# - the chaos tests that start a cluster: two lanes, taken in turn, so at most two chaos
#   clusters run at once; their fault timings are set for a loaded machine, not for four
#   clusters beside everything else.
# - anything else (unit tests, the chaos checker's): one test at a time, to any worker.
# ZooKeeper (session-scoped) is per worker; each chaos network claims a slot of its own
# (chaos.net: namespace names, addresses), every port is asked of the kernel (free_port)
# and every path is under the worker's basetemp, so nothing else is shared.
# The slow parts go first (chaos, Spark, then the files with slow tests), so that the
# short tests fill the end rather than a long one starting last.

# Every process the tests start (brokers, bench scripts, clients) imports this stand-in
# for hypothesis, as a production install has none; the tests themselves keep it: it is put
# on the PYTHONPATH of children only in the process that runs tests, not in xdist's
# controller, whose children are the workers.
NO_HYPOTHESIS = Path(__file__).parent / "no_hypothesis"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", 0):
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, str(NO_HYPOTHESIS)])


CHAOS_LANES = 2
SPARK_APART = ("tests/spark/test_projection.py",)


def _run_order(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path.startswith("tests/chaos/") and path != "tests/chaos/test_checker.py":
        return 0
    if path.startswith("tests/spark/"):
        return 1
    if path.startswith("tests/integration/"):
        return 2 if item.get_closest_marker("slow") is not None else 3
    return 4


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_run_order)  # stable: the same order on every worker


# Of each broker log a failed cluster test's report ends with.
FAILED_LOG_LINES = 150


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    support = sys.modules.get("integration.cluster_support")
    if report.when != "call" or not report.failed or support is None:
        return
    for cluster in support.OPEN:
        for i, process in sorted(cluster.brokers.items()):
            lines = process.log_text().splitlines()[-FAILED_LOG_LINES:]
            report.sections.append(
                (f"broker {i} of {cluster.chroot}, last {len(lines)} log lines", "\n".join(lines))
            )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        """LoadScopeScheduling over the groups above, in collection order."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.scopes: dict[str, str] = {}

        def _split_scope(self, nodeid: str) -> str:
            scope = self.scopes.get(nodeid)
            if scope is None:
                scope = self.scopes[nodeid] = self._scope_of(nodeid)
            return scope

        def _scope_of(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith("tests/spark/"):
                return "spark-projection" if path in SPARK_APART else "spark"
            if path.startswith("tests/integration/"):
                return path
            if path.startswith("tests/chaos/") and path != "tests/chaos/test_checker.py":
                # In turn, in the order of first sight: the collection's.
                lanes = sum(1 for s in self.scopes.values() if s.startswith("chaos-lane"))
                return f"chaos-lane-{lanes % CHAOS_LANES}"
            return nodeid

    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)


def free_port() -> int:
    from integration.ports import free_port as pooled

    return pooled()


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
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        """``preexec_fn`` runs in the child before it starts (e.g. to set an rlimit)."""
        self.data_dir = data_dir
        self.preexec_fn = preexec_fn
        self.port = free_port()
        self.config = dict(config or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> BrokerProcess:
        """Launch the broker; with ``wait`` return once it accepts connections."""
        cmd = [
            sys.executable,
            "-m",
            "chronik",
            "serve",
            "--data-dir",
            str(self.data_dir),
        ]
        # With the listeners setting, ``port`` is one of them (the test names it).
        if "listeners" not in self.config:
            cmd += ["--listen", f"127.0.0.1:{self.port}"]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec_fn
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every listener accepts connections: the broker binds them one after
        another, so the first being up says nothing of the others."""
        deadline = time.monotonic() + timeout
        wait_for_port(self.port, timeout, proc=self.proc)
        for port in self.listener_ports():
            if port != self.port:
                wait_for_port(port, max(deadline - time.monotonic(), 1.0), proc=self.proc)

    def listener_ports(self) -> list[int]:
        """The fixed ports of the `listeners` setting (port 0 ones are not known here)."""
        ports = []
        for entry in self.config.get("listeners", "").split(","):
            _, sep, address = entry.strip().partition("://")
            port = address.rpartition(":")[2]
            if sep and port.isdigit() and int(port):
                ports.append(int(port))
        return ports

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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


# --- cluster mode: one ZooKeeper server per session, a cluster per module or per test ---


def start_zookeeper(data_dir: Path) -> Any:
    """A started local ZooKeeper server; the test is skipped when ZooKeeper is not
    installed."""
    from chronik.cluster.zookeeper_process import ZooKeeperProcess, ZooKeeperUnavailable

    zk = ZooKeeperProcess(data_dir, free_port())
    try:
        return zk.start()
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster tests need ZooKeeper (scripts/install-test-deps.sh): {exc}")


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local ZooKeeper server for the session's cluster tests."""
    zk = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="module")
def cluster3(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Three brokers shared by a module's tests; tests that stop brokers use cluster_factory."""
    from integration.cluster_support import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect, 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def cluster_factory(zookeeper, tmp_path: Path) -> Iterator[object]:
    """`cluster_factory(size=3, config=None)`: a started cluster of its own, killed at teardown."""
    from integration.cluster_support import Cluster

    started: list[Cluster] = []

    def make(size: int = 3, config: Mapping[str, str] | None = None) -> Cluster:
        cluster = Cluster(tmp_path / f"cluster-{len(started)}", zookeeper.connect, size, config)
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.close()


os.environ.setdefault("CHRONIK_TESTING", "1")
