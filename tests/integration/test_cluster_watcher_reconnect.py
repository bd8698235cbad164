"""The cluster view follows ZooKeeper across lost connections: changes made while a
broker's connection to ZooKeeper is cut (its session kept, or expired) are in its view
once it is back, and the watches follow later changes again, since kazoo sets none of
them again on a new connection.

The watcher runs in this process, with its ZooKeeper session going through a proxy that
can cut the connection; the changes are made by a client of ZooKeeper's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from chronik.cluster import znodes
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView
from chronik.cluster.watcher import Watcher
from conftest import start_zookeeper

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4000
# Shorter than the session timeout: kazoo reconnects to the same session.
SHORT_CUT = 1.5
# Well past it: ZooKeeper expires the session meanwhile.
LONG_CUT = 8.0
WAIT = 30.0


class CuttingProxy:
    """A TCP proxy to ZooKeeper whose connections can be cut: ``cut()`` closes them and
    refuses new ones until ``heal()``."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            self._refusing = True
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def heal(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[object]:
    zk = start_zookeeper(tmp_path / "zookeeper")
    try:
        yield zk
    finally:
        if zk.proc is not None and zk.proc.poll() is None:
            os.kill(zk.proc.pid, signal.SIGCONT)
        zk.stop()


class Cluster:
    """Writes what a controller and brokers would, through a client of its own."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk
        for path in znodes.PERSISTENT_PATHS:
            zk.ensure_path(path)

    def register(self, node_id: int) -> None:
        info = znodes.BrokerInfo(node_id, "127.0.0.1", 9000 + node_id)
        self.zk.create(znodes.broker_path(node_id), znodes.broker_value(info))

    def deregister(self, node_id: int) -> None:
        self.zk.delete(znodes.broker_path(node_id))

    def controller(self, node_id: int | None) -> None:
        if node_id is None:
            self.zk.delete(znodes.CONTROLLER)
        elif self.zk.exists(znodes.CONTROLLER):
            self.zk.set(znodes.CONTROLLER, znodes.controller_value(node_id))
        else:
            self.zk.create(znodes.CONTROLLER, znodes.controller_value(node_id))

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> uuid.UUID:
        topic_id = uuid.uuid4()
        self.zk.create(znodes.config_path(name), znodes.config_value(configs))
        assignment = znodes.Assignment(topic_id, {p: [1] for p in range(partitions)})
        self.zk.create(znodes.topic_path(name), znodes.assignment_value(assignment))
        for p in range(partitions):
            self.set_state(name, p, leader=1, epoch=0)
        return topic_id

    def add_partitions(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        data, stat = self.zk.get(znodes.topic_path(name))
        old = znodes.parse_assignment(data)
        replicas = {p: [1] for p in range(partitions)}
        self.zk.set(znodes.topic_path(name),
                    znodes.assignment_value(znodes.Assignment(topic_id, replicas)),
                    stat.version)
        for p in range(old.partition_count, partitions):
            self.set_state(name, p, leader=1, epoch=0)

    def set_state(self, name: str, partition: int, leader: int, epoch: int) -> None:
        value = znodes.state_value(znodes.PartitionState(leader, epoch, (leader,), 1))
        path = znodes.state_path(name, partition)
        if self.zk.exists(path):
            self.zk.set(path, value)
        else:
            self.zk.create(path, value, makepath=True)

    def set_config(self, path: str, configs: dict[str, str] | None) -> None:
        if configs is None:
            self.zk.delete(path)
        elif self.zk.exists(path):
            self.zk.set(path, znodes.config_value(configs))
        else:
            self.zk.create(path, znodes.config_value(configs), makepath=True)

    def delete_topic(self, name: str) -> None:
        self.zk.delete(f"{znodes.TOPICS}/{name}", recursive=True)
        self.zk.delete(znodes.config_path(name))


def _leaders(view: ClusterView, name: str) -> dict[int, tuple[int, int]]:
    topic = view.topics.get(name)
    if topic is None:
        return {}
    return {p: (s.leader, s.leader_epoch) for p, s in topic.states.items()}


async def _until(view: ClusterView, what: str, predicate: Callable[[], bool]) -> None:
    if not await view.wait_until(predicate, WAIT):
        topics = {name: (t.assignment.topic_id, t.configs, sorted(_leaders(view, name).items()))
                  for name, t in view.topics.items()}
        raise AssertionError(
            f"the view never showed {what}: brokers {sorted(view.brokers)}, controller "
            f"{view.controller_id}, topics {topics}, users {view.users}, broker configs "
            f"{view.broker_configs}"
        )


def test_the_view_follows_changes_made_while_the_connection_was_cut(own_zookeeper):
    admin = KazooClient(hosts=own_zookeeper.connect)
    admin.start(timeout=15)
    proxy = CuttingProxy(own_zookeeper.connect)
    try:
        asyncio.run(_scenario(Cluster(admin), proxy))
    finally:
        proxy.close()
        admin.stop()
        admin.close()


async def _scenario(cluster: Cluster, proxy: CuttingProxy) -> None:
    cluster.register(1)
    cluster.register(2)
    cluster.controller(1)
    a_id = cluster.create_topic("a", 3, {"retention.ms": "1000"})
    cluster.set_config(znodes.user_path("alice"), {"SCRAM-SHA-256": "alice's"})
    cluster.set_config(znodes.broker_config_path("<default>"), {"log.retention.ms": "5"})

    session = ZkSession(proxy.address, SESSION_TIMEOUT_MS, SESSION_TIMEOUT_MS)
    await session.start()
    lost: list[str] = []
    session.on_state(lost.append)
    view = ClusterView()
    try:
        await session.run(Watcher(session, view).install)
        await _until(view, "the cluster, read", lambda: view.loaded)
        assert set(view.brokers) == {1, 2}
        assert view.controller_id == 1
        assert view.topics["a"].assignment.topic_id == a_id
        assert view.topics["a"].configs == {"retention.ms": "1000"}
        assert _leaders(view, "a") == {0: (1, 0), 1: (1, 0), 2: (1, 0)}
        assert view.users == {"alice": {"SCRAM-SHA-256": "alice's"}}
        assert view.broker_configs == {"<default>": {"log.retention.ms": "5"}}

        # Live changes.
        cluster.set_state("a", 0, leader=2, epoch=1)
        cluster.set_config(znodes.config_path("a"), {"retention.ms": "2000"})
        await _until(view, "a-0 led by 2 and a's new config",
                     lambda: _leaders(view, "a").get(0) == (2, 1)
                     and view.topics["a"].configs == {"retention.ms": "2000"})

        for cut, outcome in ((SHORT_CUT, "SUSPENDED"), (LONG_CUT, "LOST")):
            lost.clear()
            proxy.cut()
            await _until(view, "the connection lost", lambda: bool(lost))
            # Everything changes while this session cannot see it.
            cluster.set_state("a", 1, leader=2, epoch=5)
            cluster.delete_topic("a")
            a_id = cluster.create_topic("a", 2, {"cleanup.policy": "compact"})
            cluster.set_state("a", 1, leader=2, epoch=3)
            if "b" in view.topics:
                cluster.delete_topic("b")
            else:
                cluster.create_topic("b", 1, {})
            if "alice" in view.users:
                cluster.set_config(znodes.user_path("alice"), None)
                cluster.set_config(znodes.user_path("bob"), {"SCRAM-SHA-512": "bob's"})
            else:
                cluster.set_config(znodes.user_path("alice"), {"SCRAM-SHA-256": "again"})
            if "<default>" in view.broker_configs:
                cluster.set_config(znodes.broker_config_path("<default>"), None)
            cluster.set_config(znodes.broker_config_path("1"), {"cut": str(cut)})
            if 2 in view.brokers:
                cluster.deregister(2)
            else:
                cluster.register(2)
            cluster.controller(2 if view.controller_id == 1 else 1)
            await asyncio.sleep(cut)
            proxy.heal()
            await _until(view, "the connection back", lambda: lost[-1] == "CONNECTED")
            assert outcome in lost, lost

            # What changed meanwhile is in the view...
            zk = cluster.zk
            users = set(zk.get_children(znodes.CONFIG_USERS))
            entities = set(zk.get_children(znodes.CONFIG_BROKERS))
            brokers = {int(b) for b in zk.get_children(znodes.BROKER_IDS)}
            topics = set(zk.get_children(znodes.TOPICS))
            controller = znodes.parse_controller(zk.get(znodes.CONTROLLER)[0])

            def caught_up(
                users: set[str] = users,
                entities: set[str] = entities,
                brokers: set[int] = brokers,
                topics: set[str] = topics,
                controller: int = controller,
                a_id: uuid.UUID = a_id,
            ) -> bool:
                a = view.topics.get("a")
                return (
                    set(view.users) == users
                    and set(view.broker_configs) == entities
                    and set(view.brokers) == brokers
                    and set(view.topics) == topics
                    and view.controller_id == controller
                    and a is not None
                    and a.assignment.topic_id == a_id
                    and a.configs == {"cleanup.policy": "compact"}
                    and _leaders(view, "a") == {0: (1, 0), 1: (2, 3)}
                )

            await _until(view, f"the changes made during a cut of {cut} s", caught_up)

            # ... and the watches are set again: later changes come in as they happen.
            cluster.set_state("a", 0, leader=2, epoch=7)
            cluster.add_partitions("a", a_id, 3)
            cluster.set_config(znodes.config_path("a"), {"cleanup.policy": "delete"})
            cluster.set_config(znodes.user_path("carol"), {"SCRAM-SHA-256": str(cut)})
            cluster.set_config(znodes.broker_config_path("1"), {"after": str(cut)})
            await _until(
                view, "the changes made after the reconnection",
                lambda cut=cut: _leaders(view, "a") == {0: (2, 7), 1: (2, 3), 2: (1, 0)}
                and view.topics["a"].configs == {"cleanup.policy": "delete"}
                and view.users.get("carol") == {"SCRAM-SHA-256": str(cut)}
                and view.broker_configs.get("1") == {"after": str(cut)},
            )
            cluster.set_config(znodes.user_path("carol"), None)
            await _until(view, "carol gone", lambda: "carol" not in view.users)
    finally:
        await session.stop()
