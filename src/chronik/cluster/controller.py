"""The controller: one broker at a time, elected through the ephemeral /controller znode.

It writes what Kafka's controller writes: a partition state (leader, leader epoch, ISR)
for every new partition, a new state whenever a leader's broker goes or an offline
partition's broker comes back, and it carries out the deletions asked for under
/admin/delete_topics. It reads the cluster from the same ClusterView as every broker.
Each state write is a ZooKeeper transaction that also checks /controller_epoch is still
the one this controller was elected at, so a controller that lost its session (and its
office) cannot overwrite its successor's decisions.

It also carries partition reassignments through (chronik.cluster.reassignment): those
asked for by AlterPartitionReassignments or under /admin/reassign_partitions are written
into the topics' znodes, and each is completed once its target replicas are all in sync.
The reassignments in progress live in ZooKeeper, so a new controller takes them over.

Leader election is Kafka's clean election: the first replica, in assignment order, that
is alive and in the ISR. With none, the partition goes offline (leader -1) and keeps its
ISR, so the broker that had it leads it again when it returns and nothing acknowledged
is lost. A broker in controlled shutdown is neither elected nor kept in an ISR another
live member holds (chronik.cluster.controlled_shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from chronik.cluster import controlled_shutdown, reassignment, znodes
from chronik.cluster.controlled_shutdown import ShuttingDown
from chronik.cluster.reassignment import Refused
from chronik.cluster.session import ZkSession
from chronik.cluster.view import ClusterView, TopicView
from chronik.cluster.znodes import PartitionState
from chronik.protocol import errors

log = logging.getLogger("chronik.cluster.controller")
# Partition states written in one ZooKeeper transaction.
WRITE_CHUNK = 100
RETRY_SECONDS = 0.5
# How long a topic's reassignments wait for the view to read back this controller's
# write of its znode, at most.
WRITTEN_WAIT_SECONDS = 5.0
MAX_RETRY_SECONDS = 5.0
# Writes of a controlled shutdown's states tried before it answers with what remains.
SHUTDOWN_WRITE_ATTEMPTS = 5


_ELECTION_NAMES = {0: "preferred", 1: "unclean"}
_ELECTION_MESSAGES = {
    errors.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    errors.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader is not alive or not in the ISR.",
    errors.ELIGIBLE_LEADERS_NOT_AVAILABLE: "No live replica can become the leader.",
}


class NotController(Exception):
    pass


class StaleView(Exception):
    """A write refused because the view it was based on is older than ZooKeeper."""


def elect(
    replicas: list[int],
    state: PartitionState | None,
    live: set[int],
    epoch: int,
    unclean: bool = False,
) -> PartitionState | None:
    """The partition's next state, or None when it is right as it is."""
    if state is None:
        alive = [r for r in replicas if r in live]
        leader = alive[0] if alive else -1
        return PartitionState(leader, 0, tuple(alive or replicas), epoch)
    # A leader that wrote itself out of the ISR hands the partition on (its log went
    # offline); otherwise a live leader stays.
    if state.leader in live and state.leader in replicas and state.leader in state.isr:
        # A dead follower leaves the ISR at once (Kafka's controller does this on a
        # broker's failure), so acks=all does not wait replica.lag.time.max.ms for it;
        # so does a replica no longer assigned (a cancelled reassignment's).
        isr = tuple(r for r in state.isr if r in live and r in replicas)
        if isr == state.isr or not isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, isr, epoch, state.zk_version)
    candidates = [r for r in replicas if r in live and r in state.isr]
    if candidates:
        isr = tuple(r for r in state.isr if r in live and r in replicas)
        return PartitionState(candidates[0], state.leader_epoch + 1, isr, epoch, state.zk_version)
    if state.leader in live and state.leader in replicas:
        return None  # it wrote itself out, but nobody else can take over: it stays
    if unclean:
        # unclean.leader.election.enable: any live replica, accepting the loss of what
        # only the ISR had.
        alive = [r for r in replicas if r in live]
        if alive:
            return PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), epoch,
                                  state.zk_version)
    if state.leader == -1:
        return None
    return PartitionState(-1, state.leader_epoch + 1, state.isr, epoch, state.zk_version)


def elect_preferred(
    replicas: list[int], state: PartitionState | None, live: set[int], epoch: int
) -> tuple[int, PartitionState | None]:
    """Kafka's preferred replica election: the first assigned replica leads again if it
    is alive and in the ISR. (error code, new state)."""
    if state is None or not replicas:
        return errors.PREFERRED_LEADER_NOT_AVAILABLE, None
    preferred = replicas[0]
    if state.leader == preferred:
        return errors.ELECTION_NOT_NEEDED, None
    if preferred not in live or preferred not in state.isr:
        return errors.PREFERRED_LEADER_NOT_AVAILABLE, None
    return errors.NONE, PartitionState(
        preferred, state.leader_epoch + 1, state.isr, epoch, state.zk_version
    )


class Controller:
    def __init__(
        self,
        node_id: int,
        session: ZkSession,
        view: ClusterView,
        *,
        unclean_default: bool = False,
        rebalance_interval: float | None = None,
        imbalance_percentage: int = 10,
    ) -> None:
        self.node_id = node_id
        self.unclean_default = unclean_default
        # auto.leader.rebalance.enable: seconds between checks (None: off).
        self.rebalance_interval = rebalance_interval
        self.imbalance_percentage = imbalance_percentage
        self._rebalancer: asyncio.Task[None] | None = None
        self.session = session
        self.view = view
        self.active = False
        self.epoch = -1
        self._epoch_version = -1
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._electing = False
        # States this controller wrote that its view may not have read back yet, keyed by
        # (topic id, partition): the next pass starts from them, not from older news.
        self._written: dict[tuple[object, int], PartitionState] = {}
        # Topic znodes this controller wrote, and their version then: a topic whose view
        # is older waits for the watch before its reassignments are looked at again
        # (for WRITTEN_WAIT_SECONDS at most).
        self._topics_written: dict[str, tuple[int, float]] = {}
        # Brokers in controlled shutdown (chronik.cluster.controlled_shutdown).
        self.shutting_down = ShuttingDown()

    # -- office ---------------------------------------------------------------------

    async def try_elect(self) -> None:
        if self.active or self._electing:
            return
        self._electing = True
        try:
            elected = await self.session.run(self._register)
            if elected is None:
                return
            self.epoch, self._epoch_version = elected
            self.active = True
            log.info("broker %d is the controller (epoch %d)", self.node_id, self.epoch)
            self._dirty.set()
            self._task = asyncio.create_task(self._run())
            if self.rebalance_interval is not None:
                self._rebalancer = asyncio.create_task(self._rebalance_loop())
        finally:
            self._electing = False

    def _register(self) -> tuple[int, int] | None:
        """Create /controller and bump /controller_epoch in one transaction, as Kafka
        does, so nobody reads a new controller beside its predecessor's epoch, and a
        broker cut off between the two writes is never named controller without being
        one. The epoch and its znode version, or None when another broker holds the
        office."""
        client = self.session.client
        assert client is not None
        while True:
            try:
                data, stat = client.get(znodes.CONTROLLER_EPOCH)
                epoch, version = int(data or b"0") + 1, stat.version
            except NoNodeError:
                epoch, version = 1, -1
            txn = client.transaction()
            txn.create(znodes.CONTROLLER, znodes.controller_value(self.node_id),
                       ephemeral=True)
            if version == -1:
                txn.create(znodes.CONTROLLER_EPOCH, b"1")
            else:
                txn.set_data(znodes.CONTROLLER_EPOCH, str(epoch).encode(), version)
            outcome = txn.commit()
            if not any(isinstance(r, Exception) for r in outcome):
                return epoch, version + 1
            if isinstance(outcome[0], NodeExistsError):
                return self._registered_before(client)
            # The epoch moved between the read and the write: read it again.

    def _registered_before(self, client: KazooClient) -> tuple[int, int] | None:
        """/controller exists. It is this broker's when an earlier election's
        transaction was carried out after its caller gave up waiting (a ZooKeeper
        timeout): then that transaction's epoch is the current one."""
        try:
            _, stat = client.get(znodes.CONTROLLER)
            data, epoch_stat = client.get(znodes.CONTROLLER_EPOCH)
        except NoNodeError:
            return None  # the holder went meanwhile: the next view change elects
        if stat.ephemeralOwner != client.client_id[0]:
            return None
        return int(data), epoch_stat.version

    def resign(self, why: str) -> None:
        if not self.active:
            return
        self.active = False
        self.shutting_down.clear()
        log.info("broker %d is no longer the controller: %s", self.node_id, why)
        for task in (self._task, self._rebalancer):
            if task is not None:
                task.cancel()
        self._task = self._rebalancer = None

    def poke(self) -> None:
        """The view changed: look again."""
        if self.active:
            self._dirty.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._rebalancer) if t is not None]
        self._task = self._rebalancer = None
        self.active = False
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- work -----------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while self.active:
            await self._dirty.wait()
            self._dirty.clear()
            if not self.view.loaded:
                continue
            try:
                await self._reconcile()
                failures = 0
            except NotController:
                self.resign("another broker was elected meanwhile")
                return
            except asyncio.CancelledError:
                raise
            except StaleView as exc:  # a watch brings the news; the next pass uses it
                log.debug("controller: will retry: %s", exc)
                await asyncio.sleep(RETRY_SECONDS / 10)
                self._dirty.set()
            except Exception as exc:  # ZooKeeper unreachable: one line, then quieter retries
                (log.warning if failures == 0 else log.debug)("controller: will retry: %s", exc)
                await asyncio.sleep(min(RETRY_SECONDS * 2**failures, MAX_RETRY_SECONDS))
                failures += 1
                self._dirty.set()

    def _unclean(self, topic: TopicView) -> bool:
        value = topic.configs.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"

    def _current(self, topic: TopicView, partition: int) -> PartitionState | None:
        """The partition's state: the view's, or this controller's own newer write."""
        old = topic.states.get(partition)
        key = (topic.assignment.topic_id, partition)
        mine = self._written.get(key)
        if mine is None:
            return old
        if old is not None and old.zk_version >= mine.zk_version:
            del self._written[key]  # the view has caught up
            return old
        return mine

    async def _reconcile(self) -> None:
        for name in sorted(self.view.deleting):
            await self.session.run(self._delete_topic, name)
            log.info("controller: deleted topic %s", name)
        await self._advance_reassignments()
        live = set(self.view.brokers)
        self.shutting_down.prune(self.view.brokers)
        writes: list[tuple[TopicView, int, PartitionState, bool]] = []
        moved: dict[tuple[int, int], list[str]] = {}
        current = {(t.assignment.topic_id, p) for t in self.view.topics.values()
                   for p in t.assignment.replicas}
        for key in [k for k in self._written if k not in current]:
            del self._written[key]
        for topic in self.view.topics.values():
            if topic.name in self.view.deleting:
                continue
            unclean = self._unclean(topic)
            for partition, replicas in sorted(topic.assignment.replicas.items()):
                old = self._current(topic, partition)
                new = controlled_shutdown.elect_around(
                    elect, replicas, old, live, self.shutting_down, self.epoch, unclean
                )
                if new is not None:
                    writes.append((topic, partition, new, old is None))
                    if old is not None and old.leader != new.leader:
                        moved.setdefault((old.leader, new.leader), []).append(
                            f"{topic.name}-{partition}"
                        )
        await self._write(writes)
        for (old_leader, new_leader), names in sorted(moved.items()):
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            log.info(
                "controller: leader %d -> %d for %d partitions (%s%s)",
                old_leader, new_leader, len(names), ", ".join(names[:5]), more,
            )

    async def _write(self, writes: list[tuple[TopicView, int, PartitionState, bool]]) -> None:
        for start in range(0, len(writes), WRITE_CHUNK):
            chunk = writes[start : start + WRITE_CHUNK]
            await self.session.run(
                self._write_states, [(t.name, p, s, c) for t, p, s, c in chunk]
            )
            for topic, partition, state, created in chunk:
                version = 0 if created else state.zk_version + 1
                self._written[(topic.assignment.topic_id, partition)] = dataclasses.replace(
                    state, zk_version=version
                )

    # -- leader elections asked for (ElectLeaders) and the preferred leaders' return ------

    async def elect_leaders(
        self, election_type: int, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Kafka's ElectLeaders on the controller: 0 preferred, 1 unclean. Without a list,
        every partition, and only those where an election was due are reported."""
        if not self.active:
            raise NotController()
        everything = partitions is None
        if partitions is None:
            partitions = [
                (t.name, p) for t in self.view.topics.values() if t.name not in self.view.deleting
                for p in sorted(t.assignment.replicas)
            ]
        live = set(self.view.brokers)
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        writes: list[tuple[TopicView, int, PartitionState, bool]] = []
        for name, partition in partitions:
            topic = self.view.topics.get(name)
            if topic is None or partition not in topic.assignment.replicas:
                results[(name, partition)] = (
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                )
                continue
            replicas = topic.assignment.replicas[partition]
            state = self._current(topic, partition)
            new: PartitionState | None = None
            if election_type == 0:
                code, new = elect_preferred(replicas, state, live - set(self.shutting_down),
                                            self.epoch)
            elif state is not None and state.leader in live:
                code = errors.ELECTION_NOT_NEEDED
            else:
                new = controlled_shutdown.elect_around(
                    elect, replicas, state, live, self.shutting_down, self.epoch, True
                )
                code = errors.NONE if new is not None and new.leader >= 0 else (
                    errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
                )
                if code != errors.NONE:
                    new = None
            if new is not None:
                writes.append((topic, partition, new, state is None))
            if everything and code == errors.ELECTION_NOT_NEEDED:
                continue
            results[(name, partition)] = (code, _ELECTION_MESSAGES.get(code))
        await self._write(writes)
        for topic, partition, state, _ in writes:
            log.info("controller: %s election: %s-%d led by %d", _ELECTION_NAMES[election_type],
                     topic.name, partition, state.leader)
        return results

    async def controlled_shutdown(self, broker: int, broker_epoch: int) -> list[tuple[str, int]]:
        """Kafka's ControlledShutdown on the controller (chronik.cluster.controlled_shutdown):
        the partitions ``broker`` still leads once the others are handed on."""
        if not self.active:
            raise NotController()
        self.shutting_down.admit(self.view.brokers, broker, broker_epoch)
        before = controlled_shutdown.snapshot(self.view, self._current, broker)
        for _ in range(SHUTDOWN_WRITE_ATTEMPTS):
            writes = controlled_shutdown.plan(self.view, self._current, self.shutting_down,
                                              broker, elect, self.epoch, self._unclean)
            try:
                await self._write(writes)
                break
            except StaleView:  # a leader changed an ISR meanwhile: planned again from it
                await asyncio.sleep(RETRY_SECONDS / 10)
        remaining = controlled_shutdown.still_led(self.view, self._current, broker)
        after = controlled_shutdown.snapshot(self.view, self._current, broker)
        controlled_shutdown.report(broker, before, after, remaining)
        return remaining

    async def _rebalance_loop(self) -> None:
        assert self.rebalance_interval is not None
        while self.active:
            await asyncio.sleep(self.rebalance_interval)
            due = self.imbalanced()
            if due:
                try:
                    await self.elect_leaders(0, due)
                except Exception as exc:  # the next check tries again
                    log.debug("controller: preferred leader election: %s", exc)

    def imbalanced(self) -> list[tuple[str, int]]:
        """Partitions to hand back to their preferred leader: those of every broker whose
        share of not-led preferred partitions is over leader.imbalance.per.broker.percentage
        (Kafka's checkAndTriggerAutoLeaderRebalance)."""
        live = set(self.view.brokers) - set(self.shutting_down)
        preferred: dict[int, list[tuple[str, int, bool]]] = {}
        for topic in self.view.topics.values():
            if topic.name in self.view.deleting:
                continue
            for partition, replicas in topic.assignment.replicas.items():
                if not replicas:
                    continue
                state = topic.states.get(partition)
                led = state is not None and state.leader == replicas[0]
                electable = (
                    state is not None and replicas[0] in live and replicas[0] in state.isr
                )
                preferred.setdefault(replicas[0], []).append((topic.name, partition,
                                                               led or not electable))
        due: list[tuple[str, int]] = []
        for broker, parts in preferred.items():
            if broker not in live:
                continue
            not_led = [(t, p) for t, p, fine in parts if not fine]
            if not_led and len(not_led) * 100 > self.imbalance_percentage * len(parts):
                due.extend(not_led)
        return due

    # -- partition reassignments ----------------------------------------------------------

    async def alter_reassignments(
        self, wanted: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: start (a list of replicas) or cancel (None) the
        reassignment of each partition. Answers once the topics' znodes are written; the
        copying goes on in the background."""
        if not self.active:
            raise NotController()
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        by_topic: dict[str, list[tuple[int, list[int] | None]]] = {}
        for (name, partition), target in wanted.items():
            topic = self.view.topics.get(name)
            if topic is None or partition not in topic.assignment.replicas:
                results[(name, partition)] = (
                    errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                )
            elif name in self.view.deleting:
                results[(name, partition)] = (
                    errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic is being deleted."
                )
            else:
                by_topic.setdefault(name, []).append((partition, target))
        brokers = set(self.view.brokers)
        for name, items in sorted(by_topic.items()):
            outcome, version = await self.session.run(
                self._write_reassignments, name, items, brokers
            )
            self._topic_written(name, version)
            for partition, result in outcome.items():
                results[(name, partition)] = result
        # The API's word replaces whatever /admin/reassign_partitions asked for them.
        await self._drop_requests({tp for tp, r in results.items() if r[0] == errors.NONE})
        self._dirty.set()
        return results

    def _topic_written(self, name: str, version: int | None) -> None:
        if version is not None:
            deadline = asyncio.get_running_loop().time() + WRITTEN_WAIT_SECONDS
            self._topics_written[name] = (version, deadline)

    def _write_reassignments(
        self, name: str, items: list[tuple[int, list[int] | None]], brokers: set[int]
    ) -> tuple[dict[int, tuple[int, str | None]], int | None]:
        """On a ZooKeeper thread: the new replica lists of ``items`` written into the
        topic's znode, read afresh and written conditionally on its version (a broker
        adding partitions meanwhile makes it go round again). Each partition's result,
        and the znode's version once written (None: nothing written)."""
        client = self.session.client
        assert client is not None
        path = znodes.topic_path(name)
        while True:
            try:
                data, stat = client.get(path)
            except NoNodeError:
                return {p: (errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                        for p, _ in items}, None
            assignment = znodes.parse_assignment(data)
            results: dict[int, tuple[int, str | None]] = {}
            changed = False
            for partition, target in items:
                try:
                    change = reassignment.reassign(assignment, partition, target, brokers)
                except Refused as exc:
                    results[partition] = (exc.code, exc.message)
                    continue
                reassignment.apply(assignment, partition, change)
                results[partition] = (errors.NONE, None)
                changed = True
                what = "cancelled" if target is None else f"to {target}"
                log.info("controller: reassignment of %s-%d %s (replicas %s, adding %s, "
                         "removing %s)", name, partition, what, change.replicas,
                         change.adding, change.removing)
            if not changed:
                return results, None
            txn = client.transaction()
            txn.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
            txn.set_data(path, znodes.assignment_value(assignment), stat.version)
            outcome = txn.commit()
            if not any(isinstance(r, Exception) for r in outcome):
                return results, stat.version + 1
            if isinstance(outcome[0], (BadVersionError, NoNodeError)):
                raise NotController()

    async def _advance_reassignments(self) -> None:
        """Start what /admin/reassign_partitions asks for, complete every reassignment
        whose target replicas are all in sync, and take finished ones off the znode."""
        now = asyncio.get_running_loop().time()
        for name, (version, deadline) in list(self._topics_written.items()):
            topic = self.view.topics.get(name)
            if topic is None or topic.zk_version >= version or now > deadline:
                del self._topics_written[name]
        live = set(self.view.brokers)
        finished: set[tuple[str, int]] = set()
        starts: dict[str, list[tuple[int, list[int] | None]]] = {}
        for (name, partition), target in sorted(self.view.reassign_requests.items()):
            topic = self.view.topics.get(name)
            if (
                topic is None or name in self.view.deleting
                or partition not in topic.assignment.replicas
            ):
                log.warning("controller: reassignment of %s-%d asked for in %s: no such "
                            "partition", name, partition, znodes.REASSIGN_PARTITIONS)
                finished.add((name, partition))
            elif name in self._topics_written:
                continue
            elif topic.assignment.target(partition) == target:
                if not topic.assignment.reassigning(partition):
                    finished.add((name, partition))
            else:
                try:
                    reassignment.check_target(target, live)
                except Refused as exc:
                    log.warning("controller: reassignment of %s-%d asked for in %s refused: "
                                "%s", name, partition, znodes.REASSIGN_PARTITIONS, exc.message)
                    finished.add((name, partition))
                    continue
                starts.setdefault(name, []).append((partition, target))
        for name, items in sorted(starts.items()):
            outcome, version = await self.session.run(
                self._write_reassignments, name, items, live
            )
            self._topic_written(name, version)
            for partition, (code, message) in outcome.items():
                if code != errors.NONE:
                    log.warning("controller: reassignment of %s-%d refused: %s", name,
                                partition, message)
                    finished.add((name, partition))
        for topic in list(self.view.topics.values()):
            if (
                topic.name in self._topics_written or topic.name in self.view.deleting
                or not (topic.assignment.adding or topic.assignment.removing)
            ):
                continue
            done: list[tuple[int, PartitionState]] = []
            for partition in sorted(topic.assignment.replicas):
                if not topic.assignment.reassigning(partition):
                    continue
                state = reassignment.completion(
                    topic.assignment, partition, self._current(topic, partition), live,
                    self.epoch, self.shutting_down,
                )
                if state is not None:
                    done.append((partition, state))
            if done:
                await self._complete_reassignments(topic, done)
        await self._drop_requests(finished)

    async def _complete_reassignments(
        self, topic: TopicView, done: list[tuple[int, PartitionState]]
    ) -> None:
        """The topic's replica lists become the targets and the partitions' states their
        new leaders and ISRs, in one transaction. What it is based on is taken here, on
        the loop: the view changes under a ZooKeeper thread (this very write's watch)."""
        name, version = topic.name, topic.zk_version
        assignment = znodes.Assignment(
            topic.assignment.topic_id,
            {p: list(r) for p, r in topic.assignment.replicas.items()},
            dict(topic.assignment.adding),
            dict(topic.assignment.removing),
        )
        for partition, _ in done:
            target = assignment.target(partition)
            reassignment.apply(assignment, partition, reassignment.Change(target, [], []))
        await self.session.run(self._write_completion, name, version, assignment, done)
        self._topic_written(name, version + 1)
        for partition, state in done:
            self._written[(assignment.topic_id, partition)] = dataclasses.replace(
                state, zk_version=state.zk_version + 1
            )
            log.info("controller: reassignment of %s-%d completed: replicas %s, leader %d, "
                     "isr %s", name, partition, assignment.replicas[partition],
                     state.leader, list(state.isr))

    def _write_completion(
        self, name: str, version: int, assignment: znodes.Assignment,
        done: list[tuple[int, PartitionState]],
    ) -> None:
        client = self.session.client
        assert client is not None
        txn = client.transaction()
        txn.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
        txn.set_data(znodes.topic_path(name), znodes.assignment_value(assignment), version)
        for partition, state in done:
            txn.set_data(znodes.state_path(name, partition), znodes.state_value(state),
                         state.zk_version)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise NotController()
            raise StaleView(f"reassignment of {name} not completed: the topic or a "
                            "partition state changed meanwhile")

    async def _drop_requests(self, finished: set[tuple[str, int]]) -> None:
        """Take partitions off /admin/reassign_partitions (deleted once empty), as
        Kafka's controller does once each completes."""
        requests = self.view.reassign_requests
        if not finished & requests.keys():
            return
        left = {tp: r for tp, r in requests.items() if tp not in finished}
        # Changed meanwhile: its watch brings another pass.
        with contextlib.suppress(BadVersionError, NoNodeError):
            await self.session.run(self._write_requests, left, self.view.reassign_version)

    def _write_requests(self, left: dict[tuple[str, int], list[int]], version: int) -> None:
        client = self.session.client
        assert client is not None
        if left:
            client.set(znodes.REASSIGN_PARTITIONS, znodes.reassignments_value(left), version)
        else:
            client.delete(znodes.REASSIGN_PARTITIONS, version)

    def _write_states(self, writes: list[tuple[str, int, PartitionState, bool]]) -> None:
        client = self.session.client
        assert client is not None
        # A new partition's parent znode is created in the same transaction as its state:
        # one round trip per topic to see which exist, not three per partition.
        parents: dict[str, set[str]] = {}
        for name, _, _, created in writes:
            if created and name not in parents:
                try:
                    parents[name] = set(client.get_children(znodes.partitions_path(name)))
                except NoNodeError:
                    client.ensure_path(znodes.partitions_path(name))
                    parents[name] = set()
        txn = client.transaction()
        txn.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
        for name, partition, state, created in writes:
            path = znodes.state_path(name, partition)
            if created:
                if str(partition) not in parents[name]:
                    txn.create(f"{znodes.partitions_path(name)}/{partition}", b"")
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
            raise StaleView(f"partition state writes refused: {failures[0]!r}")

    def _delete_topic(self, name: str) -> None:
        client = self.session.client
        assert client is not None
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.topic_path(name), recursive=True)
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.config_path(name))
        with contextlib.suppress(NoNodeError):
            client.delete(znodes.delete_path(name))
