"""The controller: one broker at a time, elected through the ephemeral /controller znode.

It writes what Kafka's controller writes: a partition state (leader, leader epoch, ISR)
for every new partition, a new state whenever a leader's broker goes or an offline
partition's broker comes back, and it carries out the deletions asked for under
/admin/delete_topics. It reads the cluster from the same ClusterView as every broker.
Each state write is a ZooKeeper transaction that also checks /controller_epoch is still
the one this controller was elected at, so a controller that lost its session (and its
office) cannot overwrite its successor's decisions.

Leader election is Kafka's clean election: the first replica, in assignment order, that
is alive and in the ISR. With none, the partition goes offline (leader -1) and keeps its
ISR, so the broker that had it leads it again when it returns and nothing acknowledged
is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from chronik.cluster import znodes
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView
from chronik.cluster.znodes import PartitionState

log = logging.getLogger("chronik.cluster.controller")
# Partition states written in one ZooKeeper transaction.
WRITE_CHUNK = 100
RETRY_SECONDS = 0.5


class NotController(Exception):
    pass


def elect(
    replicas: list[int], state: PartitionState | None, live: set[int], epoch: int
) -> PartitionState | None:
    """The partition's next state, or None when it is right as it is."""
    if state is None:
        alive = [r for r in replicas if r in live]
        leader = alive[0] if alive else -1
        return PartitionState(leader, 0, tuple(alive or replicas), epoch)
    if state.leader in live and state.leader in replicas:
        return None
    candidates = [r for r in replicas if r in live and r in state.isr]
    if candidates:
        isr = tuple(r for r in state.isr if r in live)
        return PartitionState(candidates[0], state.leader_epoch + 1, isr, epoch, state.zk_version)
    if state.leader == -1:
        return None
    return PartitionState(-1, state.leader_epoch + 1, state.isr, epoch, state.zk_version)


class Controller:
    def __init__(self, node_id: int, session: ZkSession, view: ClusterView) -> None:
        self.node_id = node_id
        self.session = session
        self.view = view
        self.active = False
        self.epoch = -1
        self._epoch_version = -1
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._electing = False

    # -- office ---------------------------------------------------------------------

    async def try_elect(self) -> None:
        if self.active or self._electing:
            return
        self._electing = True
        try:
            client = self.session.client
            assert client is not None
            try:
                await self.session.run(
                    client.create,
                    znodes.CONTROLLER,
                    znodes.controller_value(self.node_id),
                    ephemeral=True,
                )
            except NodeExistsError:
                return
            self.epoch, self._epoch_version = await self.session.run(self._bump_epoch)
            self.active = True
            log.info("broker %d is the controller (epoch %d)", self.node_id, self.epoch)
            self._dirty.set()
            self._task = asyncio.create_task(self._run())
        finally:
            self._electing = False

    def _bump_epoch(self) -> tuple[int, int]:
        client = self.session.client
        assert client is not None
        while True:
            try:
                data, stat = client.get(znodes.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    client.create(znodes.CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                return 1, 0
            epoch = int(data or b"0") + 1
            try:
                stat = client.set(znodes.CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
            except BadVersionError:
                continue
            return epoch, stat.version

    def resign(self, why: str) -> None:
        if not self.active:
            return
        self.active = False
        log.info("broker %d is no longer the controller: %s", self.node_id, why)
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def poke(self) -> None:
        """The view changed: look again."""
        if self.active:
            self._dirty.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        self.active = False
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- work -----------------------------------------------------------------------

    async def _run(self) -> None:
        while self.active:
            await self._dirty.wait()
            self._dirty.clear()
            if not self.view.loaded:
                continue
            try:
                await self._reconcile()
            except NotController:
                self.resign("another broker was elected meanwhile")
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # ZooKeeper unreachable, a race with another writer
                log.warning("controller: will retry: %s", exc)
                await asyncio.sleep(RETRY_SECONDS)
                self._dirty.set()

    async def _reconcile(self) -> None:
        for name in sorted(self.view.deleting):
            await self.session.run(self._delete_topic, name)
            log.info("controller: deleted topic %s", name)
        live = set(self.view.brokers)
        writes: list[tuple[str, int, PartitionState, bool]] = []
        moved: dict[tuple[int, int], list[str]] = {}
        for topic in self.view.topics.values():
            if topic.name in self.view.deleting:
                continue
            for partition, replicas in sorted(topic.assignment.replicas.items()):
                old = topic.states.get(partition)
                new = elect(replicas, old, live, self.epoch)
                if new is not None:
                    writes.append((topic.name, partition, new, old is None))
                    if old is not None and old.leader != new.leader:
                        moved.setdefault((old.leader, new.leader), []).append(
                            f"{topic.name}-{partition}"
                        )
        for start in range(0, len(writes), WRITE_CHUNK):
            await self.session.run(self._write_states, writes[start : start + WRITE_CHUNK])
        for (old_leader, new_leader), names in sorted(moved.items()):
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            log.info(
                "controller: leader %d -> %d for %d partitions (%s%s)",
                old_leader, new_leader, len(names), ", ".join(names[:5]), more,
            )

    def _write_states(self, writes: list[tuple[str, int, PartitionState, bool]]) -> None:
        client = self.session.client
        assert client is not None
        for name, partition, _, created in writes:
            if created:
                client.ensure_path(f"{znodes.partitions_path(name)}/{partition}")
        txn = client.transaction()
        txn.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
        for name, partition, state, created in writes:
            path = znodes.state_path(name, partition)
            if created:
                txn.create(path, znodes.state_value(state))
            else:
                txn.set_data(path, znodes.state_value(state), state.zk_version)
        results = txn.commit()
        failures = [
            r for r in results
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError,
                                                               RuntimeInconsistency))
        ]
        if failures:
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise NotController()
            # A state changed or a topic went meanwhile: its watch brings the news and
            # another pass.
            raise RuntimeError(f"partition state writes refused: {failures[0]!r}")

    def _delete_topic(self, name: str) -> None:
        client = self.session.client
        assert client is not None
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.topic_path(name), recursive=True)
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.config_path(name))
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.delete_path(name))
