"""The cluster view's ZooKeeper watches cost a constant number of threads, however many
znodes a broker watches and however often its ZooKeeper connection drops: a broker
holding a topic of thousands of partitions, whose ZooKeeper is paused again and again
(the connection dropped, the session mostly kept) and which is itself paused past its
session timeout (the session expired), stays under a hundred threads and its view still
follows the cluster afterwards. And a broker joining a cluster of several
thousand partitions reads them all in a few seconds, whatever the session timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import NewPartitions, NewTopic
from kazoo.client import KazooClient
from tests.conftest import free_port, start_zookeeper, wait_for_port

from chronik.cluster import znodes

from .cluster_support import Cluster, wait_until

pytestmark = pytest.mark.slow

BIG_PARTITIONS = 2000
# A broker at rest runs a few dozen threads; kazoo's recipes ran one per watched znode on
# every reconnection, thousands here.
MAX_THREADS = 100
# Long enough for kazoo to give the connection up (two thirds of the 6 s session timeout
# without an answer), mostly short enough for the session to outlive it.
SHORT_PAUSE = 4.5
# The broker paused well past the session timeout: ZooKeeper, running, expires its
# session. (ZooKeeper paused as long may or may not: once it runs again, its expiry of
# the session races the broker's reconnection.)
LONG_PAUSE = 10.0


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[object]:
    """A ZooKeeper of this test's own: it is paused, which the session's must not be."""
    zk = start_zookeeper(tmp_path / "zookeeper")
    try:
        yield zk
    finally:
        if zk.proc is not None and zk.proc.poll() is None:
            os.kill(zk.proc.pid, signal.SIGCONT)
        zk.stop()


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no thread count for process {pid}")


class ThreadSampler:
    """The highest thread count of a process, sampled every 50 ms in the background."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.highest = threads_of(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.highest = max(self.highest, threads_of(self.pid))
            except (OSError, AssertionError):
                return  # the process is gone; the test says why

    def __enter__(self) -> ThreadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _create(cluster: Cluster, name: str, partitions: int, timeout: float = 120.0) -> None:
    futures = cluster.admin(1).create_topics(
        [NewTopic(name, partitions, 1)], request_timeout=timeout, operation_timeout=timeout
    )
    futures[name].result()


def _partition_count(cluster: Cluster, name: str) -> int:
    md = cluster.admin(1).list_topics(name, timeout=10)
    topic = md.topics.get(name)
    if topic is None or topic.error is not None:
        return 0
    return len(topic.partitions)


def _listed(cluster: Cluster, name: str) -> bool:
    return name in cluster.admin(1).list_topics(timeout=10).topics


def _topic_id(cluster: Cluster, name: str) -> str:
    """The topic id broker 1 describes, in Kafka's text form (librdkafka prints it in
    standard base64, Kafka in its URL-safe variant)."""
    futures = cluster.admin(1).describe_topics(TopicCollection([name]), request_timeout=10)
    return str(futures[name].result().topic_id).replace("+", "-").replace("/", "_")


def test_flapping_zookeeper_costs_no_thread_per_watched_znode(own_zookeeper, tmp_path):
    cluster = Cluster(tmp_path / "cluster", own_zookeeper.connect, 1)
    try:
        cluster.start()
        _create(cluster, "big", BIG_PARTITIONS)
        cluster.wait_topic("big", BIG_PARTITIONS, timeout=240)
        broker = cluster.broker(1)
        assert broker.proc is not None
        pid = broker.proc.pid
        at_rest = threads_of(pid)
        zk = own_zookeeper.proc

        def log_count(line: str) -> int:
            return cluster.log_text(1).count(line)

        with ThreadSampler(pid) as sampler:
            for paused, pause in ((zk.pid, SHORT_PAUSE), (zk.pid, SHORT_PAUSE),
                                  (zk.pid, SHORT_PAUSE), (pid, LONG_PAUSE)):
                reconnected = log_count("reconnected to ZooKeeper")
                os.kill(paused, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(paused, signal.SIGCONT)
                wait_until(lambda n=reconnected: log_count("reconnected to ZooKeeper") > n,
                           "the broker reconnected to ZooKeeper", timeout=60)
                # Reconnected, kazoo's recipes set off their threads: leave them the time.
                time.sleep(3.0)
            # A broker whose session expired registers again; the cluster settles.
            cluster.wait_settled()
        lost = log_count("ZooKeeper connection lost")
        expired = log_count("ZooKeeper session expired;")
        assert lost + expired >= 4, (lost, expired)
        assert expired >= 1, "the broker's long pause did not expire its session"
        print(f"threads: {at_rest} at rest, at most {sampler.highest} while ZooKeeper came "
              f"and went ({lost} connections lost, {expired} sessions expired)")
        assert sampler.highest < MAX_THREADS, (
            f"{sampler.highest} threads while ZooKeeper came and went ({at_rest} at rest)"
        )

        # The view follows the cluster: every partition of the big topic is still led,
        # and topics created, grown, deleted and created again show in Metadata.
        cluster.wait_topic("big", BIG_PARTITIONS, timeout=120)
        _create(cluster, "after", 3)
        cluster.wait_topic("after", 3)
        cluster.admin(1).create_partitions([NewPartitions("after", 5)],
                                           request_timeout=30)["after"].result()
        cluster.wait_topic("after", 5)
        cluster.admin(1).delete_topics(["after"], request_timeout=30)["after"].result()
        wait_until(lambda: not _listed(cluster, "after"), "topic after gone from Metadata")
        wait_until(lambda: _create(cluster, "after", 2) or True, "topic after created again")
        cluster.wait_topic("after", 2)
        assert _partition_count(cluster, "after") == 2
        wait_until(lambda: _topic_id(cluster, "after")
                   == cluster.get_json("/brokers/topics/after")["topic_id"],
                   "the topic created again described with its new id")
        assert threads_of(pid) < MAX_THREADS
        assert "Traceback" not in cluster.log_text(1)
    finally:
        cluster.close()


STARTUP_PARTITIONS = 6000
# Short timeouts: reading the cluster at start is bounded by its progress, not by one
# session timeout.
STARTUP_SESSION_TIMEOUT_MS = 3000
# Each way, between the broker and ZooKeeper: a ZooKeeper slow to answer (a loaded
# machine, a distant ensemble), where one round trip per znode adds up to a minute.
STARTUP_DELAY_SECONDS = 0.005
STARTUP_LIMIT_SECONDS = 60.0


@pytest.fixture
def slow_zookeeper(own_zookeeper, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(address, control file) of a proxy to ZooKeeper that delays what it forwards by
    the seconds written in the control file."""

    control = tmp_path / "zookeeper-delay"
    control.write_text("0")
    port = free_port()
    tests = Path(__file__).resolve().parents[1]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "chaos.proxy", f"127.0.0.1:{port}",
         own_zookeeper.connect, str(control)],
        env={**os.environ, "PYTHONPATH": str(tests)},
    )
    try:
        wait_for_port(port, 10, proc=proxy)
        yield f"127.0.0.1:{port}", control
    finally:
        proxy.kill()
        proxy.wait()


def _write_topic(cluster: Cluster, name: str, partitions: int, replica: int) -> None:
    """A topic as the controller writes it, placed on a broker that is not running, so
    the broker under test has its whole metadata to read and nothing to store."""
    root = KazooClient(hosts=cluster.zk_connect)
    root.start(timeout=15)
    try:
        root.ensure_path(cluster.chroot)
    finally:
        root.stop()
        root.close()
    zk = cluster.zk
    assignment = znodes.Assignment(uuid.uuid4(), {p: [replica] for p in range(partitions)})
    for path in znodes.PERSISTENT_PATHS:
        zk.ensure_path(path)
    zk.create(znodes.config_path(name), znodes.config_value({}))
    zk.create(znodes.topic_path(name), znodes.assignment_value(assignment))
    # Offline, as the controller leaves a partition whose replicas are all down.
    state = znodes.state_value(znodes.PartitionState(-1, 1, (replica,), 1))
    batch = 500
    for start in range(0, partitions, batch):
        tx = zk.transaction()
        if start == 0:
            tx.create(znodes.partitions_path(name), b"")
        for p in range(start, min(start + batch, partitions)):
            tx.create(znodes.state_path(name, p).rsplit("/", 1)[0], b"")
            tx.create(znodes.state_path(name, p), state)
        results = tx.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        assert not failed, failed[:3]


class BrokerExited(AssertionError):
    pass


def _wait_or_raise(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """wait_until, but a BrokerExited ends the wait at once."""

    def check() -> bool:
        try:
            return predicate()
        except BrokerExited:
            raise
        except Exception:  # noqa: BLE001 - a broker starting answers with errors
            return False

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def test_a_broker_joins_a_cluster_of_thousands_of_partitions_through_a_slow_zookeeper(
    slow_zookeeper, tmp_path
):
    address, delay = slow_zookeeper
    config = {
        "zookeeper.session.timeout.ms": str(STARTUP_SESSION_TIMEOUT_MS),
        "zookeeper.connection.timeout.ms": str(STARTUP_SESSION_TIMEOUT_MS),
    }
    cluster = Cluster(tmp_path / "cluster", address, 2, config)
    try:
        half = STARTUP_PARTITIONS // 2
        for t in range(2):
            _write_topic(cluster, f"held-elsewhere-{t}", half, replica=2)
        delay.write_text(str(STARTUP_DELAY_SECONDS))
        time.sleep(0.5)  # the proxy reads its control file every 0.1 s
        broker = cluster.broker(1)
        started = time.monotonic()
        broker.start(wait=False)

        def up() -> bool:
            if not broker.running:
                tail = "\n".join(broker.log_text().splitlines()[-5:])
                raise BrokerExited(f"the broker exited while starting:\n{tail}")
            return cluster.live_ids() == {1} and all(
                _partition_count(cluster, f"held-elsewhere-{t}") == half for t in range(2)
            )

        _wait_or_raise(up, "the broker up, with every partition in Metadata",
                       STARTUP_LIMIT_SECONDS)
        took = time.monotonic() - started
        cluster.wait_settled()
        assert broker.running
        log = cluster.log_text(1)
        assert "Traceback" not in log
        assert "did not answer" not in log
        print(f"broker up with {STARTUP_PARTITIONS} partitions in ZooKeeper, "
              f"{2 * STARTUP_DELAY_SECONDS * 1000:.0f} ms away, in {took:.1f} s")
    finally:
        cluster.close()
