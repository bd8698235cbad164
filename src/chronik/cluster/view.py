"""What this broker knows of the cluster: live brokers, the controller, every topic's
replicas, partition states and configs. Kept current by ZooKeeper watches
(chronik.cluster.watcher) and read by the request handlers, which never talk to
ZooKeeper themselves. Every change happens on the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from chronik.cluster.znodes import Assignment, BrokerInfo, PartitionState

RECHECK_SECONDS = 0.02

# Change stamps: a topic's assignment or partition states, or the set of live brokers,
# take a new number from this one count each time they change, so that a stamp never
# names two contents, not even those of a topic deleted and created again. What is
# derived from them (the Metadata handler's encoded entries) is kept until they change.
_stamps = itertools.count(1)


def new_stamp() -> int:
    return next(_stamps)


@dataclass
class TopicView:
    name: str
    assignment: Assignment
    zk_version: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    # Changed through set_assignment / set_state, which renew the stamp.
    states: dict[int, PartitionState] = field(default_factory=dict)
    stamp: int = field(default_factory=new_stamp, compare=False)

    @property
    def partition_count(self) -> int:
        return self.assignment.partition_count

    def set_assignment(self, assignment: Assignment, zk_version: int) -> None:
        """A new replica assignment; states of partitions it no longer has go."""
        self.assignment = assignment
        self.zk_version = zk_version
        for partition in list(self.states):
            if partition not in assignment.replicas:
                del self.states[partition]
        self.stamp = new_stamp()

    def set_state(self, partition: int, state: PartitionState | None) -> None:
        if state is None:
            self.states.pop(partition, None)
        else:
            self.states[partition] = state
        self.stamp = new_stamp()


class ClusterView:
    def __init__(self) -> None:
        self._brokers: dict[int, BrokerInfo] = {}
        self.brokers_stamp = new_stamp()
        self.controller_id = -1
        self.topics: dict[str, TopicView] = {}
        self.deleting: set[str] = set()
        # /admin/reassign_partitions: targets asked for by Kafka's ZooKeeper-mode tools,
        # and the znode's version (-1: none).
        self.reassign_requests: dict[tuple[str, int], list[int]] = {}
        self.reassign_version = -1
        # SCRAM credentials from /config/users: user -> mechanism -> Kafka's string.
        self.users: dict[str, dict[str, str]] = {}
        # Dynamic broker configs from /config/brokers: "<id>" or "<default>" -> configs.
        self.broker_configs: dict[str, dict[str, str]] = {}
        # Set once the first full read of brokers and topics is done: until then a topic
        # missing from the view may just not have been read yet.
        self.loaded = False
        self._listeners: list[Callable[[], None]] = []
        self._changed = asyncio.Event()

    @property
    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers, replaced as a whole (never changed in place) when they change."""
        return self._brokers

    @brokers.setter
    def brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        self._brokers = brokers
        self.brokers_stamp = new_stamp()

    # -- queries -----------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        view = self.topics.get(topic)
        return None if view is None else view.partition_count

    def state(self, topic: str, partition: int) -> PartitionState | None:
        view = self.topics.get(topic)
        return None if view is None else view.states.get(partition)

    def replicas(self, topic: str, partition: int) -> list[int]:
        view = self.topics.get(topic)
        return [] if view is None else view.assignment.replicas.get(partition, [])

    def leader_of(self, topic: str, partition: int) -> int:
        state = self.state(topic, partition)
        if state is None or state.leader not in self.brokers:
            return -1
        return state.leader

    def topic_by_id(self, topic_id: object) -> TopicView | None:
        for view in self.topics.values():
            if view.assignment.topic_id == topic_id:
                return view
        return None

    def leaders_known(self, topic: str, partitions: range | None = None) -> bool:
        view = self.topics.get(topic)
        if view is None:
            return False
        wanted = partitions if partitions is not None else range(view.partition_count)
        return all(self.leader_of(topic, p) >= 0 for p in wanted)

    # -- changes -----------------------------------------------------------------------

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def changed(self) -> None:
        """Called after every update: listeners run, and waiters wake to check again."""
        for listener in self._listeners:
            listener()
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                async with asyncio.timeout(left):
                    await self._changed.wait()
            except TimeoutError:
                return predicate()
            # Changes come in bursts (a topic's partition states one by one): look again
            # once the burst has passed rather than after each of its changes.
            await asyncio.sleep(min(RECHECK_SECONDS, max(deadline - loop.time(), 0)))
        return True
