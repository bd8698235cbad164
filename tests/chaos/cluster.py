"""A chronik cluster on a private network (chaos.net): ZooKeeper, brokers 1..N, and
client nodes whose workers run inside their own namespaces, so a split can leave
producers on both sides.

The harness itself reaches every node over its own link to the hub, which faults never
cut: it watches ZooKeeper, reads each broker's Metadata and, after healing, each
replica's files.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from .net import Network
from .nodes import BrokerNode, ZooKeeperNode

log = logging.getLogger("chaos.cluster")
T = TypeVar("T")

CHROOT = "/chronik"
SESSION_TIMEOUT_MS = 6000
LAG_MS = 3000
BROKER_CONFIG: dict[str, str] = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": str(LAG_MS),
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
    "unclean.leader.election.enable": "false",
    "group.min.session.timeout.ms": "1000",
    "num.partitions": "3",
}


# The longest one read of ZooKeeper by the harness waits (a timeout is an error that
# the harness's waits take as "not yet").
ZK_CALL_S = 5.0

# Broker i's ZooKeeper proxy listens on this port + i, in ZooKeeper's namespace.
PROXY_BASE_PORT = 2190


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(
    predicate: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.2
) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:  # noqa: BLE001 - a cluster in transition answers errors
            result, last = None, exc  # type: ignore[assignment]
        if result:
            return result
        if time.monotonic() > deadline:
            hint = f" (last error: {last!r})" if last is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{hint}")
        time.sleep(interval)


class ChaosCluster:
    def __init__(
        self,
        base: Path,
        brokers: int = 3,
        clients: int = 2,
        config: Mapping[str, str] | None = None,
        faketime: bool = False,
        disk_mb: int = 0,
        zk_proxies: bool = False,
    ) -> None:
        """``zk_proxies``: each broker reaches ZooKeeper through a delaying proxy of its
        own (chaos.proxy), so ``delay_zookeeper`` can slow one broker's session."""
        self.base = Path(base)
        self.broker_names = [f"b{i}" for i in range(1, brokers + 1)]
        self.client_names = [f"c{i}" for i in range(1, clients + 1)]
        self.net = Network(["zk", *self.broker_names, *self.client_names])
        self.zookeeper = ZooKeeperNode(self.net, "zk", self.base / "zookeeper")
        common = {
            **BROKER_CONFIG,
            **(config or {}),
            "zookeeper.connect": f"{self.net.address('zk')}:2181{CHROOT}",
        }
        self.zk_proxies = zk_proxies
        self._proxies: dict[int, subprocess.Popen[bytes]] = {}
        self.brokers: dict[int, BrokerNode] = {}
        for i, name in enumerate(self.broker_names, start=1):
            config_i = dict(common)
            if zk_proxies:
                config_i["zookeeper.connect"] = (
                    f"{self.net.address('zk')}:{PROXY_BASE_PORT + i}{CHROOT}"
                )
            self.brokers[i] = BrokerNode(
                self.net, name, i, self.base / name, config_i, disk_mb, faketime
            )
        self._zk: KazooClient | None = None
        self._admin: AdminClient | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> ChaosCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self.net.create()
        try:
            self.zookeeper.start()
            if self.zk_proxies:
                self._start_proxies()
            for b in self.brokers.values():
                b.setup().start(wait=False)
            for b in self.brokers.values():
                b.wait_ready(timeout)
            self.wait_settled(timeout)
        except Exception:
            self.close()
            raise
        return self

    def close(self) -> None:
        self._admin = None
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
        for b in self.brokers.values():
            b.destroy()
        for proxy in self._proxies.values():
            proxy.kill()
            proxy.wait()
        self._proxies.clear()
        self.zookeeper.resume()
        self.zookeeper.stop()
        self.net.release()

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_proxies(self) -> None:
        zk = self.net.address("zk")
        tests_dir = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": tests_dir}
        for i in self.brokers:
            self._delay_file(i).write_text("0\n")
            self._proxies[i] = subprocess.Popen(
                [*self.net.exec_prefix("zk"), sys.executable, "-m", "chaos.proxy",
                 f"{zk}:{PROXY_BASE_PORT + i}", f"{zk}:2181", str(self._delay_file(i))],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        for i in self.brokers:
            wait_until(lambda i=i: _accepts(zk, PROXY_BASE_PORT + i), f"ZooKeeper proxy {i}", 30)

    def _delay_file(self, broker_id: int) -> Path:
        return self.base / f"zk-proxy-{broker_id}.delay"

    def delay_zookeeper(self, broker_id: int, seconds: float) -> None:
        """Delay each direction of broker ``broker_id``'s ZooKeeper traffic by
        ``seconds`` (0: none). Needs ``zk_proxies``."""
        if not self.zk_proxies:
            raise RuntimeError("this cluster runs without ZooKeeper proxies")
        tmp = self._delay_file(broker_id).with_suffix(".tmp")
        tmp.write_text(f"{seconds}\n")
        tmp.replace(self._delay_file(broker_id))

    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    def broker(self, i: int) -> BrokerNode:
        return self.brokers[i]

    def node_name(self, broker_id: int) -> str:
        return self.brokers[broker_id].name

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    # -- ZooKeeper, read by the harness ------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            client = KazooClient(hosts=f"{self.zookeeper.connect}{CHROOT}", timeout=10)
            client.start(timeout=20)
            self._zk = client
        return self._zk

    def get_json(self, path: str) -> Any:
        # Bounded: kazoo queues a call made while ZooKeeper is down and waits for it
        # without end, and a fault may look ZooKeeper up while another has it down.
        data, _ = self.zk.get_async(path).get(timeout=ZK_CALL_S)
        return json.loads(data)

    def children(self, path: str) -> list[str]:
        return list(self.zk.get_children_async(path).get(timeout=ZK_CALL_S))

    def live_ids(self) -> set[int]:
        try:
            return {int(c) for c in self.children("/brokers/ids")}
        except NoNodeError:
            return set()

    def controller_id(self) -> int:
        try:
            return int(self.get_json("/controller")["brokerid"])
        except NoNodeError:
            return -1

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        return self.get_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def assignment(self, topic: str) -> dict[int, list[int]]:
        doc = self.get_json(f"/brokers/topics/{topic}")
        return {int(p): r for p, r in doc["partitions"].items()}

    def moving(self, topic: str) -> dict[int, tuple[list[int], list[int]]]:
        """The topic's partitions being reassigned: partition -> (adding, removing)."""
        doc = self.get_json(f"/brokers/topics/{topic}")
        adding = {int(p): r for p, r in (doc.get("adding_replicas") or {}).items() if r}
        removing = {int(p): r for p, r in (doc.get("removing_replicas") or {}).items() if r}
        return {p: (adding.get(p, []), removing.get(p, [])) for p in {*adding, *removing}}

    def leader(self, topic: str, partition: int) -> int:
        return int(self.partition_state(topic, partition)["leader"])

    # -- admin ---------------------------------------------------------------------------

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(
        self, name: str, partitions: int, rf: int = 3, config: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        futures = self.admin().create_topics(
            [NewTopic(name, partitions, rf, config=dict(config or {}))],
            operation_timeout=timeout, request_timeout=timeout,
        )
        futures[name].result(timeout=timeout + 10)
        self.wait_full_isr(name, partitions, timeout)

    def wait_full_isr(self, topic: str, partitions: int, timeout: float = 60.0) -> None:
        def full() -> bool:
            assignment = self.assignment(topic)
            for p in range(partitions):
                state = self.partition_state(topic, p)
                if state["leader"] < 0 or sorted(state["isr"]) != sorted(assignment[p]):
                    return False
            return True

        wait_until(full, f"{topic}: every partition led with its full ISR", timeout)

    def wait_reassigned(self, topic: str, timeout: float = 60.0) -> None:
        """Until no partition of ``topic`` is being reassigned."""
        wait_until(lambda: not self.moving(topic), f"{topic}: no reassignment in progress",
                   timeout)

    def wait_settled(self, timeout: float = 90.0) -> None:
        up = {i for i, b in self.brokers.items() if b.running and not b.paused}
        wait_until(lambda: self.live_ids() >= up, f"brokers {sorted(up)} registered", timeout)
        wait_until(lambda: self.controller_id() in up, "a live controller", timeout)

    def partition_dir(self, i: int, topic: str, partition: int) -> Path:
        return self.brokers[i].data_dir / f"{topic}-{partition}"

    def running(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.running]

    def log_texts(self) -> dict[str, str]:
        return {b.name: b.log_text() for b in self.brokers.values()}
