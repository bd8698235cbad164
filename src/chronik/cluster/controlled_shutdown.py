"""Kafka's controlled shutdown, the controller's side: a broker about to stop asks the
controller (ControlledShutdown) to hand the leadership of its partitions to other
in-sync replicas first, so that clients find the new leaders while it still answers,
rather than after the controller has noticed its registration gone.

From the request until the broker's registration goes, or comes back with a new broker
epoch (the czxid of /brokers/ids/<id>), the controller treats it as Kafka's controller
treats a broker in shuttingDownBrokerIds:

- it is never elected leader: not of a new partition, not in a failover, not in a
  preferred-leader election or rebalance;
- a partition it leads goes to the first replica, in assignment order, that is alive,
  not shutting down and in the ISR, at leader epoch + 1, and the broker leaves the ISR.
  With no such replica it keeps leading: the partition remains, named in the answer,
  and the broker asks again after controlled.shutdown.retry.backoff.ms;
- it leaves the ISR of every partition it follows (the leader and its epoch stay: only
  the ISR changed), and a leader that took it back on a stray fetch is undone at the
  controller's next pass.

Partitions with a single replica are neither acted on nor reported: nothing can take
them over (Kafka's controller leaves them out the same way). The states are written as
every state of the controller is, in a ZooKeeper transaction that checks
/controller_epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping

from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import BrokerInfo, PartitionState
from chronik.protocol import errors
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.cluster.controller")

# The controller's clean election (chronik.cluster.controller.elect).
Elect = Callable[[list[int], PartitionState | None, set[int], int, bool], PartitionState | None]
Current = Callable[[TopicView, int], PartitionState | None]
Write = tuple[TopicView, int, PartitionState, bool]


class BrokerNotAvailable(StorageError):
    code = errors.BROKER_NOT_AVAILABLE


class StaleBrokerEpoch(StorageError):
    code = errors.STALE_BROKER_EPOCH


class ShuttingDown(Collection[int]):
    """The brokers in controlled shutdown, each with the broker epoch it asked with."""

    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}

    def __contains__(self, broker: object) -> bool:
        return broker in self._epochs

    def __iter__(self) -> Iterator[int]:
        return iter(self._epochs)

    def __len__(self) -> int:
        return len(self._epochs)

    def admit(self, brokers: Mapping[int, BrokerInfo], broker: int, broker_epoch: int) -> None:
        """Kafka's checks of a ControlledShutdown request (broker_epoch -1: not checked),
        then the broker is shutting down."""
        info = brokers.get(broker)
        if info is None:
            raise BrokerNotAvailable(f"Broker id {broker} does not exist.")
        if 0 <= broker_epoch < info.epoch:
            raise StaleBrokerEpoch(
                f"Received controlled shutdown request from an old broker epoch "
                f"{broker_epoch} for broker {broker}. Current broker epoch is {info.epoch}."
            )
        # A broker epoch newer than the view's is the registration the view reads next.
        self._epochs[broker] = max(broker_epoch, info.epoch, self._epochs.get(broker, -1))

    def prune(self, brokers: Mapping[int, BrokerInfo]) -> None:
        """Forget brokers whose registration went, or came back (a newer broker epoch)."""
        for broker, epoch in list(self._epochs.items()):
            info = brokers.get(broker)
            if info is None or info.epoch > epoch:
                del self._epochs[broker]
                log.info("controller: broker %d is no longer shutting down (%s)", broker,
                         "deregistered" if info is None else "registered again")

    def clear(self) -> None:
        self._epochs.clear()


def elect_around(
    elect: Elect,
    replicas: list[int],
    state: PartitionState | None,
    live: set[int],
    shutting_down: Collection[int],
    epoch: int,
    unclean: bool = False,
) -> PartitionState | None:
    """``elect``, with the brokers shutting down neither elected nor kept in an ISR that
    another live member holds (Kafka's ControlledShutdownLeaderElection, and its
    controller's liveBrokerIds, which leave them out)."""
    if not shutting_down:
        return elect(replicas, state, live, epoch, unclean)
    eligible = {b for b in live if b not in shutting_down}
    if state is not None and state.leader in live and state.leader in shutting_down:
        successors = [r for r in replicas if r in eligible and r in state.isr]
        if not successors:
            # Nobody in sync to take over: it keeps leading, as any live leader does.
            return elect(replicas, state, eligible | {state.leader}, epoch, unclean)
        isr = tuple(r for r in state.isr if r in eligible)
        return PartitionState(successors[0], state.leader_epoch + 1, isr, epoch,
                              state.zk_version)
    return elect(replicas, state, eligible, epoch, unclean)


def _acted_on(view: ClusterView, broker: int) -> Iterator[tuple[TopicView, int, list[int]]]:
    for topic in view.topics.values():
        if topic.name in view.deleting:
            continue
        for partition, replicas in sorted(topic.assignment.replicas.items()):
            if broker in replicas and len(replicas) > 1:
                yield topic, partition, replicas


def snapshot(view: ClusterView, current: Current, broker: int) -> dict[str, PartitionState]:
    """The states of the partitions acted on, by name, to report what changed."""
    out = {}
    for topic, partition, _ in _acted_on(view, broker):
        state = current(topic, partition)
        if state is not None:
            out[f"{topic.name}-{partition}"] = state
    return out


def plan(
    view: ClusterView,
    current: Current,
    shutting_down: Collection[int],
    broker: int,
    elect: Elect,
    epoch: int,
    unclean: Callable[[TopicView], bool],
) -> list[Write]:
    """The states to write so that ``broker`` neither leads nor is in an ISR where
    another live in-sync replica can take its place."""
    live = set(view.brokers)
    writes: list[Write] = []
    for topic, partition, replicas in _acted_on(view, broker):
        old = current(topic, partition)
        if old is None:
            continue
        new = elect_around(elect, replicas, old, live, shutting_down, epoch, unclean(topic))
        if new is not None:
            writes.append((topic, partition, new, False))
    return writes


def still_led(view: ClusterView, current: Current, broker: int) -> list[tuple[str, int]]:
    """The partitions with more than one replica that ``broker`` leads (the answer's
    remaining_partitions)."""
    out = []
    for topic, partition, _ in _acted_on(view, broker):
        state = current(topic, partition)
        if state is not None and state.leader == broker:
            out.append((topic.name, partition))
    return out


def _names(names: list[str]) -> str:
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


def report(
    broker: int,
    before: Mapping[str, PartitionState],
    after: Mapping[str, PartitionState],
    remaining: list[tuple[str, int]],
) -> None:
    """One line: the partitions whose leadership moved, those whose ISR it left, and
    those it still leads."""
    moved = [n for n, s in before.items() if s.leader == broker and
             n in after and after[n].leader != broker]
    left = [n for n, s in before.items() if s.leader != broker and broker in s.isr and
            n in after and broker not in after[n].isr]
    text = f"controller: controlled shutdown of broker {broker}: leadership of " \
           f"{len(moved)} partitions handed on"
    if moved:
        text += f" ({_names(moved)})"
    if left:
        text += f"; out of the ISR of {len(left)} more ({_names(left)})"
    if remaining:
        names = [f"{t}-{p}" for t, p in remaining]
        text += (f"; still leads {len(remaining)}, with no other in-sync replica "
                 f"({_names(names)})")
    log.info("%s", text)
