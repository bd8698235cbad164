"""A leader's ISR write against a real ZooKeeper: conditional on the state znode's
version the leader last saw, so a change the controller made meanwhile is never written
over (Kafka's updateLeaderAndIsr)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from chronik.broker.config import BrokerConfig
from chronik.cluster import znodes
from chronik.cluster.replica_manager import ReplicaManager
from chronik.cluster.session import ZkSession
from chronik.cluster.znodes import PartitionState

TOPIC = "events"


def _manager(session: ZkSession) -> ReplicaManager:
    node = SimpleNamespace(
        node_id=1, session=session, config=BrokerConfig({"broker.id": "1"})
    )
    return ReplicaManager(node)  # type: ignore[arg-type]


def test_an_isr_write_never_puts_back_a_broker_the_controller_removed(zookeeper):
    """The controller takes dead broker 2 out of the ISR, keeping the leader epoch; the
    leader, which has not heard of it yet, writes an ISR computed from the one it knew.
    The write used to re-read the znode and go through at whatever version it found,
    checking only leader and epoch, putting broker 2 back. It must be refused and the
    controller's ISR returned instead."""

    async def scenario() -> tuple[tuple[bool, PartitionState] | None, PartitionState]:
        session = ZkSession(f"{zookeeper.connect}/isr-writes", 6000, 10000)
        await session.start()
        try:
            client = session.client
            assert client is not None
            path = znodes.state_path(TOPIC, 0)
            known = PartitionState(1, 0, (1, 2, 3), 1)
            await session.run(client.create, path, znodes.state_value(known), makepath=True)
            # The controller: broker 2 is dead; same leader, same epoch, next version.
            removed = PartitionState(1, 0, (1, 3), 1)
            await session.run(client.set, path, znodes.state_value(removed), 0)
            # The leader, from what it knew at version 0: broker 3 lags, so (1, 2).
            outcome = await session.run(
                _manager(session)._write_isr_znode, TOPIC, 0, PartitionState(1, 0, (1, 2), 1), 0
            )
            data, stat = await session.run(client.get, path)
            return outcome, znodes.parse_state(data, stat.version)
        finally:
            await session.stop()

    outcome, now = asyncio.run(scenario())
    assert now.isr == (1, 3), f"the controller's ISR was written over: {now}"
    assert outcome is not None
    written, current = outcome
    assert not written
    assert current.isr == (1, 3) and current.zk_version == 1
