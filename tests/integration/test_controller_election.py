"""Controller election against a real ZooKeeper: /controller and /controller_epoch are
written in one transaction (Kafka's registerControllerAndIncrementControllerEpoch), and
an election whose answer came too late is taken up rather than leaving the cluster with
a /controller nobody acts for."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

from kazoo.client import KazooClient

from chronik.cluster import znodes
from chronik.cluster.controller import Controller
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView

_chroots = itertools.count()


def _chroot(zookeeper) -> str:
    """A chroot of its own, created first (kazoo warns of a missing one)."""
    path = f"/controller-election-{next(_chroots)}"
    client = KazooClient(hosts=zookeeper.connect)
    client.start()
    try:
        client.ensure_path(path)
    finally:
        client.stop()
        client.close()
    return f"{zookeeper.connect}{path}"


async def _session(hosts: str) -> ZkSession:
    session = ZkSession(hosts, 6000, 10000)
    await session.start()
    return session


def test_every_new_controller_is_seen_with_its_own_epoch(zookeeper):
    """A watcher that reads /controller_epoch as soon as /controller names a new broker
    reads that broker's epoch, never its predecessor's: the two znodes change at once.
    Written one after the other, the cluster's tests saw a survivor named controller at
    the killed controller's epoch."""
    hosts = _chroot(zookeeper)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    observer = KazooClient(hosts=hosts)
    observer.start()

    def on_controller(data: bytes | None, _stat: object) -> None:
        if data is None:
            return
        epoch, _ = observer.get(znodes.CONTROLLER_EPOCH)
        with lock:
            seen.append((int(json.loads(data)["brokerid"]), int(epoch)))

    observer.DataWatch(znodes.CONTROLLER, on_controller)

    async def handovers() -> list[int]:
        epochs = []
        for broker in range(1, 7):
            session = await _session(hosts)
            controller = Controller(broker, session, ClusterView())
            await controller.try_elect()
            assert controller.active, f"broker {broker} was not elected"
            epochs.append(controller.epoch)
            deadline = time.monotonic() + 10
            while broker not in dict(seen) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # the observer's look at this one, then on
            await controller.stop()
            await session.stop()  # its ephemeral /controller goes with the session
        return epochs

    try:
        epochs = asyncio.run(handovers())
    finally:
        observer.stop()
        observer.close()
    assert epochs == list(range(1, 7))
    assert seen == [(broker, broker) for broker in range(1, 7)], seen


def test_an_election_answered_too_late_is_taken_up(zookeeper):
    """The election's transaction is carried out but its answer never reaches the broker
    (a ZooKeeper timeout). /controller then names this broker: the next try must make it
    the controller at that transaction's epoch, not give up on a node that exists."""
    hosts = _chroot(zookeeper)

    async def scenario() -> tuple[bool, int, int]:
        session = await _session(hosts)
        try:
            controller = Controller(1, session, ClusterView())
            await session.run(controller._register)  # the answer the broker never had
            await controller.try_elect()
            active, epoch = controller.active, controller.epoch
            await controller.stop()
            client = session.client
            assert client is not None
            data, _ = await session.run(client.get, znodes.CONTROLLER_EPOCH)
            return active, epoch, int(data)
        finally:
            await session.stop()

    active, epoch, stored = asyncio.run(scenario())
    assert active
    assert epoch == stored == 1


def test_a_broker_does_not_take_up_another_sessions_controller_znode(zookeeper):
    """The same broker id, a new session: a /controller its old session still holds is
    not its to take up."""
    hosts = _chroot(zookeeper)

    async def scenario() -> tuple[bool, bool]:
        old = await _session(hosts)
        new = await _session(hosts)
        try:
            first = Controller(1, old, ClusterView())
            await first.try_elect()
            second = Controller(1, new, ClusterView())
            await second.try_elect()
            outcome = first.active, second.active
            await first.stop()
            await second.stop()
            return outcome
        finally:
            await new.stop()
            await old.stop()

    assert asyncio.run(scenario()) == (True, False)
