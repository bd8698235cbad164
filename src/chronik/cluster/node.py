"""This broker as a member of a cluster: its ZooKeeper session and registration, the
cluster view the handlers read, the controller it may become, the partitions it stores,
and the admin changes any broker can make (as Kafka's brokers do in ZooKeeper mode:
the broker that takes a CreateTopics request writes the assignment, the controller
elects the leaders).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from chronik.cluster import znodes
from chronik.cluster.controller import Controller
from chronik.cluster.kafka_assignment import rack_unaware
from chronik.cluster.replica_manager import ReplicaManager
from chronik.cluster.session import KazooState, ZkSession, ZooKeeperUnavailable
from chronik.cluster.shutdown_request import shut_down_controlled
from chronik.cluster.users import write_users
from chronik.cluster.view import ClusterView
from chronik.cluster.watcher import Watcher
from chronik.cluster.znodes import Assignment, BrokerInfo
from chronik.protocol import errors
from chronik.storage.catalog import run_stepwise, validate_topic_name
from chronik.storage.config import validate_topic_configs
from chronik.storage.errors import (
    InvalidPartitions,
    InvalidTopicName,
    PolicyViolation,
    StorageError,
    TopicExists,
    UnknownTopicOrPartition,
)

if TYPE_CHECKING:
    from chronik.broker.config import BrokerConfig
    from chronik.security.broker_security import BrokerSecurity
    from chronik.storage.catalog import Catalog
    from chronik.storage.partition_log import PartitionLog

log = logging.getLogger("chronik.cluster")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
PRODUCER_ID_BLOCK = 1000
# How often a broker whose id is still registered by its previous (killed) process
# tries again; the old registration goes when ZooKeeper expires that session.
REGISTER_RETRY_SECONDS = 0.5
RECONCILE_DEBOUNCE_SECONDS = 0.02
LOAD_RETRY_MAX_SECONDS = 10.0
ROLES_DEBOUNCE_SECONDS = 0.05
# How soon a pass whose deletion of moved partitions failed (a full disk) is tried
# again, when no change of the view brings one sooner.
REMOVE_RETRY_SECONDS = 2.0
# kazoo's ping timing varies by up to this much.
LEASE_JITTER_SECONDS = 0.5


class InvalidReplicationFactor(StorageError):
    code = errors.INVALID_REPLICATION_FACTOR


class RequestTimedOut(StorageError):
    code = errors.REQUEST_TIMED_OUT


class PartitionCoordinator(Protocol):
    """A coordinator that serves the partitions of an internal topic this broker leads
    (the group coordinator on __consumer_offsets, the transaction coordinator on
    __transaction_state): told as leadership comes (Kafka's onElection) and goes
    (onResignation)."""

    async def load_partition(self, partition: int) -> None: ...

    def is_loaded(self, partition: int) -> bool: ...

    def unload_partition(self, partition: int) -> None: ...


class ClusterNode:
    def __init__(
        self,
        config: BrokerConfig,
        security: BrokerSecurity,
        advertised: Callable[[], tuple[str, int]],
    ) -> None:
        self.config = config
        self.security = security
        # This broker's inter-broker endpoint, known once its listeners are bound.
        self._advertised = advertised
        # Given by the server (serve()) before start(): the local logs, the wake-up of
        # fetches waiting on a log, and the coordinators of the internal topics.
        self.catalog: Catalog
        self.wake_fetches: Callable[..., None] = lambda log, followers=True: None
        self._coordinators: dict[str, PartitionCoordinator] = {}
        self._on_topic_deleted: Callable[[str], None] | None = None
        # The base URLs of this broker's schema registry and HTTP listener, registered
        # with its endpoints.
        self.registry_url: Callable[[], str | None] = lambda: None
        self.http_url: Callable[[], str | None] = lambda: None
        self.node_id = config.node_id
        self.rack = config.rack
        self.session = ZkSession(
            config.zookeeper_connect,
            config.zookeeper_session_timeout_ms,
            config.zookeeper_connection_timeout_ms,
        )
        self.view = ClusterView()
        self.watcher = Watcher(self.session, self.view)
        self.controller = Controller(
            self.node_id,
            self.session,
            self.view,
            unclean_default=config.unclean_leader_election,
            rebalance_interval=(
                config.leader_imbalance_check_seconds if config.auto_leader_rebalance else None
            ),
            imbalance_percentage=config.leader_imbalance_percentage,
        )
        self.replicas = ReplicaManager(self)
        self.cluster_id = ""
        self._reconciling: asyncio.Task[None] | None = None
        self._reconcile_again = False
        self._store_failed: set[str] = set()  # topics logged once until stored
        # Topics whose moved partitions' copies could not be deleted yet (logged once).
        self._remove_failed: set[str] = set()
        self._remove_retry: asyncio.TimerHandle | None = None
        # (topic id, assignment znode version) of each topic whose partitions are all here.
        self._stored: dict[str, tuple[uuid.UUID, int]] = {}
        self._known_topics: set[str] = set()
        self._foreign_warned: set[str] = set()
        # Partitions of each internal topic whose coordinator is loaded (or loading) here.
        self._loaded: dict[str, set[int]] = {OFFSETS_TOPIC: set(), TRANSACTION_TOPIC: set()}
        self._pid_next = 0
        self._pid_end = -1
        self._pid_lock = asyncio.Lock()
        self._pid_spare: tuple[int, int] | None = None
        self._session_lost = False
        self._expired = False
        self._suspended_at: float | None = None
        self._lease_grace = max(
            config.zookeeper_session_timeout_ms / 3000 - LEASE_JITTER_SECONDS, 0.0
        )
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._roles_sync: asyncio.TimerHandle | None = None
        self._reconcile_lock = asyncio.Lock()

    # -- lifecycle --------------------------------------------------------------------

    def serve(
        self,
        catalog: Catalog,
        wake_fetches: Callable[..., None],
        offsets: PartitionCoordinator | None,
        transactions: PartitionCoordinator | None,
        on_topic_deleted: Callable[[str], None] | None = None,
    ) -> None:
        """What the layer above gives the cluster before start(): its local logs, how to
        wake the fetches waiting on a log the replicas appended to, and the coordinators
        to load and unload as this broker comes to lead or stops leading a partition of
        __consumer_offsets or __transaction_state."""
        self.catalog = catalog
        self.wake_fetches = wake_fetches
        self._coordinators = {
            name: c
            for name, c in ((OFFSETS_TOPIC, offsets), (TRANSACTION_TOPIC, transactions))
            if c is not None
        }
        self._on_topic_deleted = on_topic_deleted

    async def connect(self, local_cluster_id: str | None) -> str:
        """Open the session and agree on the cluster id (the first broker's becomes the
        cluster's, as in Kafka). Returns it."""
        try:
            await self.session.start()
        except Exception as exc:
            raise RuntimeError(
                f"cannot reach ZooKeeper at {self.config.zookeeper_connect}: {exc}"
            ) from None
        self.cluster_id = await self.session.run(self._cluster_id, local_cluster_id)
        return self.cluster_id

    def _cluster_id(self, proposed: str | None) -> str:
        client = self.session.client
        assert client is not None
        for path in znodes.PERSISTENT_PATHS:
            client.ensure_path(path)
        client.ensure_path("/cluster")
        proposed = proposed or znodes.uuid_to_kafka(uuid.uuid4())
        with contextlib.suppress(NodeExistsError):
            client.create(znodes.CLUSTER_ID, znodes.cluster_id_value(proposed))
        data, _ = client.get(znodes.CLUSTER_ID)
        return znodes.parse_cluster_id(data)

    async def start(self) -> None:
        """Read the cluster, then join it: storage follows the view from here on."""
        self.session.on_state(self._on_session_state)
        self.view.subscribe(self._on_view_change)
        loaded = asyncio.get_running_loop().create_future()

        def first_load() -> None:
            if self.view.loaded and not loaded.done():
                loaded.set_result(None)

        self.view.subscribe(first_load)
        await self.session.run(self.watcher.install)
        await loaded
        self.replicas.start()
        await self._reconcile()
        await self._register()
        await self.controller.try_elect()
        # A block of producer ids in hand, so idempotent producers start even while
        # ZooKeeper is briefly away.
        try:
            await self._refill_producer_ids()
        except ZooKeeperUnavailable as exc:
            log.warning("no producer id block yet: %s", exc)

    async def controlled_shutdown(self) -> bool:
        """Before stopping: hand this broker's leadership on through the controller
        (Kafka's controlled shutdown, chronik.cluster.shutdown_request); whether that
        succeeded. Requests are still served meanwhile."""
        if self._stopping or self.node_id not in self.view.brokers:
            return False  # not registered (yet): nothing is led here
        return await shut_down_controlled(self)

    async def stop(self) -> None:
        self._stopping = True
        if self._remove_retry is not None:
            self._remove_retry.cancel()
        if self._reconciling is not None:
            self._reconciling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciling
        await self.controller.stop()
        await self.replicas.stop()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.session.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _register(self) -> None:
        client = self.session.client
        assert client is not None
        info = self._info()
        path = znodes.broker_path(self.node_id)
        warned = False
        while not self._stopping:
            try:
                await self.session.run(
                    client.create, path, znodes.broker_value(info), ephemeral=True
                )
                log.info("registered as broker %d in cluster %s", self.node_id, self.cluster_id)
                return
            except NodeExistsError:
                _, stat = await self.session.run(client.get, path)
                if stat.ephemeralOwner == self.session.session_id:
                    return
                if not warned:
                    log.warning(
                        "broker id %d is still registered by an earlier session; waiting for "
                        "ZooKeeper to expire it (zookeeper.session.timeout.ms)",
                        self.node_id,
                    )
                    warned = True
                await asyncio.sleep(REGISTER_RETRY_SECONDS)

    def _on_session_state(self, state: str) -> None:
        if self._stopping:
            return  # closing the session ourselves
        if state == KazooState.LOST:
            self._session_lost = True
            self._expired = True
            log.warning("ZooKeeper session expired; registering again when reconnected")
            self.controller.resign("its ZooKeeper session expired")
            self.replicas.lease_lost()
        elif state == KazooState.SUSPENDED:
            if self._suspended_at is None:
                self._suspended_at = time.monotonic()
            log.warning("ZooKeeper connection lost; reconnecting")
        elif state == KazooState.CONNECTED:
            # Only a reconnection comes here: the first connection is made before start().
            self._suspended_at = None
            log.info("reconnected to ZooKeeper")
            if self._session_lost:
                self._session_lost = False
                self._spawn(self._rejoin())

    def lease_held(self) -> bool:
        """Whether this broker's ZooKeeper session is certainly alive, so that nobody can
        have been given its partitions: connected, or disconnected for less than the
        time after which ZooKeeper may expire it. kazoo notices a dead connection when a
        ping goes unanswered, up to two thirds of the session timeout after ZooKeeper
        last heard from it, so the session may expire a third of the timeout after that
        (less a margin for the ping's jitter). An expired session holds no lease until
        this broker has registered again."""
        if self._expired:
            return False
        since = self._suspended_at
        if since is None:
            return True
        return time.monotonic() - since < self._lease_grace

    async def _rejoin(self) -> None:
        while not self._stopping:
            try:
                await self._register()
                await self.controller.try_elect()
                self._expired = False
                return
            except ZooKeeperUnavailable as exc:
                log.debug("registering again: %s", exc)
                await asyncio.sleep(REGISTER_RETRY_SECONDS)

    async def _try_elect(self) -> None:
        try:
            await self.controller.try_elect()
        except ZooKeeperUnavailable as exc:
            log.debug("controller election: %s", exc)  # the next change tries again

    def _on_view_change(self) -> None:
        if self._stopping:
            return
        self.controller.poke()
        # A /controller of this broker's while it is not the controller is an election
        # whose answer came too late; try_elect takes the office up.
        vacant = self.view.controller_id == -1 or (
            self.view.controller_id == self.node_id and not self.controller.active
        )
        if vacant and self.view.loaded:
            self._spawn(self._try_elect())
        if self._reconciling is not None and not self._reconciling.done():
            self._reconcile_again = True  # the running pass goes round once more
            # A pass storing a large topic takes seconds; roles of the partitions stored
            # already follow the view meanwhile, once per burst of changes.
            if self._roles_sync is None and self.view.loaded:
                self._roles_sync = asyncio.get_running_loop().call_later(
                    ROLES_DEBOUNCE_SECONDS, self._sync_roles
                )
        else:
            self._reconciling = asyncio.get_running_loop().create_task(self._reconcile_loop())

    def _sync_roles(self) -> None:
        self._roles_sync = None
        if self._stopping:
            return
        self.replicas.sync()
        self._follow_coordinator_leadership()

    # -- storage follows the view -----------------------------------------------------

    async def _reconcile_loop(self) -> None:
        while not self._stopping:
            self._reconcile_again = False
            try:
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the cluster's changes failed; trying again")
                await asyncio.sleep(REGISTER_RETRY_SECONDS)
                self._reconcile_again = True
            if not self._reconcile_again:
                return
            # Changes come in bursts (a new topic's partition states one by one): the next
            # pass takes the whole burst.
            await asyncio.sleep(RECONCILE_DEBOUNCE_SECONDS)

    async def _reconcile(self) -> None:
        """Store every partition assigned here, drop topics the cluster deleted, apply
        topic configs, and hand __consumer_offsets partitions to the group coordinator
        as leadership comes and goes. Partitions are created stepwise (run_stepwise), so
        the loop serves requests meanwhile; a change of the view meanwhile brings another
        pass. One pass at a time: two passes storing the same new topic would each create
        its partition directories, and the one that lost would delete them under the
        other's logs."""
        async with self._reconcile_lock:
            await self._reconcile_pass()

    async def _reconcile_pass(self) -> None:
        if not self.view.loaded or self._stopping:
            return
        catalog = self.catalog
        for name in sorted(self._known_topics - set(self.view.topics)):
            self._topic_gone(name)
        for name in [n for n in catalog.topics if n not in self.view.topics]:
            if catalog.topics[name].sparse:
                self._topic_gone(name)  # deleted from the cluster while this broker was away
            elif name not in self._foreign_warned:
                # A single node's topic in this data directory: kept, never served here.
                self._foreign_warned.add(name)
                log.warning(
                    "topic %s in %s is not part of cluster %s; it is left on disk, unserved",
                    name, catalog.data_dir, self.cluster_id,
                )
        self._known_topics = set(self.view.topics)
        # Roles of partitions stored already are taken up before new ones are stored,
        # which for a large topic takes seconds: a failover is not held up by it.
        self._sync_roles()
        for topic in list(self.view.topics.values()):
            local = catalog.get(topic.name)
            if local is not None and local.topic_id != topic.assignment.topic_id:
                if not local.sparse:
                    continue  # a single node's topic of the same name: never overwritten
                self._topic_gone(topic.name)  # an earlier topic of that name
            stored = (topic.assignment.topic_id, topic.zk_version)
            if self._stored.get(topic.name) == stored:
                mine = []  # this assignment is stored here already
            else:
                mine = [p for p, r in sorted(topic.assignment.replicas.items())
                        if self.node_id in r]
                removed = True
                if local is not None and local.sparse:
                    removed = self._remove_moved(topic.name, set(mine))
                if not mine and removed:
                    self._stored[topic.name] = stored  # none of it belongs here
            if mine:
                steps = catalog.ensure_replicas_steps(
                    topic.name,
                    topic.assignment.topic_id,
                    topic.partition_count,
                    mine,
                    topic.configs,
                )
                try:
                    await run_stepwise(steps)
                    self._store_failed.discard(topic.name)
                    if removed:
                        self._stored[topic.name] = stored
                except Exception as exc:
                    if topic.name not in self._store_failed:
                        self._store_failed.add(topic.name)
                        log.error("cannot store partitions of %s here: %s", topic.name, exc)
                if self._stopping:
                    return
            local = catalog.get(topic.name)
            if local is not None and local.configs != topic.configs:
                try:
                    catalog.alter_topic_configs(topic.name, topic.configs, replace=True)
                except Exception as exc:
                    log.error("cannot apply the configs of topic %s: %s", topic.name, exc)
        self.replicas.sync()
        self._follow_coordinator_leadership()

    def _remove_moved(self, name: str, mine: set[int]) -> bool:
        """Delete the local copies of the topic's partitions reassigned to other brokers
        (Kafka's StopReplica with deletion). Their roles went with the sync before.
        False when they could not be deleted (a full disk): the topic is then not taken
        for stored, so the next pass tries again, and one comes within
        REMOVE_RETRY_SECONDS even if the view does not change (else the copies would
        stay until a restart)."""
        local = self.catalog.get(name)
        if local is None:
            return True
        moved = [p for p, plog in enumerate(local.partitions) if plog is not None
                 and p not in mine]
        if not moved:
            self._remove_failed.discard(name)
            return True
        self.replicas.sync()
        self._follow_coordinator_leadership()
        try:
            removed = self.catalog.remove_replicas(name, moved)
        except Exception as exc:
            if name not in self._remove_failed:
                self._remove_failed.add(name)
                log.error("cannot delete the local copies of %s partitions %s: %s; trying "
                          "again", name, moved, exc)
            self._retry_removal()
            return False
        self._remove_failed.discard(name)
        if removed:
            log.info("deleted the local copies of %s partitions %s: reassigned to other "
                     "brokers", name, removed)
        return True

    def _retry_removal(self) -> None:
        if self._remove_retry is None and not self._stopping:
            self._remove_retry = asyncio.get_running_loop().call_later(
                REMOVE_RETRY_SECONDS, self._removal_due
            )

    def _removal_due(self) -> None:
        self._remove_retry = None
        if self._remove_failed:
            self._on_view_change()

    def _topic_gone(self, name: str) -> None:
        self._stored.pop(name, None)
        catalog = self.catalog
        if catalog.get(name) is not None:
            try:
                catalog.delete_topic(name)
                log.info("deleted the local partitions of topic %s", name)
            except Exception as exc:
                log.error("cannot delete the local partitions of topic %s: %s", name, exc)
        if name in self._loaded:
            for partition in sorted(self._loaded[name]):
                self._unload(name, partition)
        elif self._on_topic_deleted is not None:
            self._on_topic_deleted(name)

    def _follow_coordinator_leadership(self) -> None:
        """The group and transaction coordinators serve the partitions of
        __consumer_offsets and __transaction_state this broker leads, loaded as it
        learns it leads them and unloaded as it stops."""
        for topic, loaded in self._loaded.items():
            coordinator = self._coordinators.get(topic)
            if coordinator is None:
                continue
            count = self.view.partition_count(topic) or 0
            led = {p for p in range(count) if self.local_log(topic, p) is not None}
            for partition in sorted(loaded - led):
                self._unload(topic, partition)
            for partition in sorted(led - loaded):
                loaded.add(partition)
                self._spawn(self._load(coordinator, partition, loaded))

    async def _load(self, coordinator: PartitionCoordinator, partition: int, led: set[int]) -> None:
        """Load a coordinator's partition, and again after a failure (logged by the
        coordinator) for as long as this broker leads it, as Kafka's coordinators are
        loaded again rather than left answering NOT_COORDINATOR."""
        delay = REGISTER_RETRY_SECONDS
        while not self._stopping and partition in led:
            await coordinator.load_partition(partition)
            if coordinator.is_loaded(partition) or partition not in led:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, LOAD_RETRY_MAX_SECONDS)

    def _unload(self, topic: str, partition: int) -> None:
        self._loaded[topic].discard(partition)
        coordinator = self._coordinators.get(topic)
        if coordinator is not None:
            coordinator.unload_partition(partition)

    # -- what the handlers ask ----------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        return self.view.partition_count(topic)

    def leader_of(self, topic: str, partition: int) -> int:
        return self.view.leader_of(topic, partition)

    def local_log(self, topic: str, partition: int) -> PartitionLog | None:
        """The log of a partition this broker leads now, else None. Leading means the
        view names this broker and the replica manager has taken up that leadership at
        the view's epoch: until then (storing a large topic, a checkpoint that cannot be
        written) the partition is not served here. Writes also need the lease
        (``lease_held``); reads of what the ISR holds do not."""
        if self.view.leader_of(topic, partition) != self.node_id:
            return None
        local = self.catalog.get(topic)
        if local is None:
            return None
        view = self.view.topics.get(topic)
        if view is None or local.topic_id != view.assignment.topic_id:
            return None
        state = view.states.get(partition)
        if state is None:
            return None
        plog = self.replicas.leading(topic, partition, state.leader_epoch)
        return plog if plog is not None and plog is local.log(partition) else None

    def is_local_leader(self, topic: str, partition: int) -> bool:
        return self.local_log(topic, partition) is not None

    def partition_error(self, topic: str, partition: int) -> int:
        """The error a data request (Produce, Fetch, ListOffsets, DeleteRecords) for a
        partition gets here: none when this broker leads it."""
        count = self.view.partition_count(topic)
        if count is None or not 0 <= partition < count:
            return errors.UNKNOWN_TOPIC_OR_PARTITION
        if self.local_log(topic, partition) is None:
            return errors.NOT_LEADER_OR_FOLLOWER
        return errors.NONE

    def controller_id(self) -> int:
        return self.view.controller_id

    def live_brokers(self) -> list[BrokerInfo]:
        brokers = dict(self.view.brokers)
        # Our own registration may not be back from ZooKeeper yet.
        brokers.setdefault(self.node_id, self._info())
        return [brokers[b] for b in sorted(brokers)]

    def _info(self) -> BrokerInfo:
        """This broker's registration: its inter-broker endpoint and every listener's."""
        endpoints = tuple(
            (spec.name, spec.protocol, *spec.advertised())
            for spec in self.security.listeners
        )
        host, port = self._advertised()
        return BrokerInfo(
            self.node_id, host, port, self.rack, endpoints,
            schema_registry=self.registry_url(), http_api=self.http_url(),
        )

    def broker_info(self, node_id: int) -> BrokerInfo | None:
        for info in self.live_brokers():
            if info.node_id == node_id:
                return info
        return None

    # -- admin: any broker writes, the controller elects ---------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> uuid.UUID:
        validate_topic_name(name)
        for other in self.view.topics:
            if other == name:
                raise TopicExists(f"Topic '{name}' already exists.")
            if other.replace(".", "_") == name.replace(".", "_"):
                raise InvalidTopicName(f"Topic '{name}' collides with existing topic: {other}")
        validate_topic_configs(configs)
        live = [b.node_id for b in self.live_brokers()]
        if assignments:
            replicas = {p: list(r) for p, r in assignments.items()}
            if sorted(replicas) != list(range(len(replicas))):
                raise InvalidPartitions("Partitions of a replica assignment must be 0..n-1.")
            for p, r in replicas.items():
                if not r or len(set(r)) != len(r):
                    raise InvalidReplicationFactor(f"Partition {p} has an invalid replica list.")
                unknown = [b for b in r if b not in live]
                if unknown:
                    raise InvalidReplicationFactor(f"Unknown or dead brokers {unknown}.")
        else:
            if partitions <= 0:
                raise InvalidPartitions("Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise InvalidReplicationFactor("Replication factor must be larger than 0.")
            if replication_factor > len(live):
                raise InvalidReplicationFactor(
                    f"Replication factor: {replication_factor} larger than available brokers: "
                    f"{len(live)}."
                )
            replicas = rack_unaware(partitions, replication_factor, live)
        self._check_broker_limits(replicas, name)
        topic_id = uuid.uuid4()
        if validate_only:
            return topic_id
        assignment = Assignment(topic_id, replicas)
        await self.session.run(self._write_topic, name, dict(configs), assignment)
        log.info("created topic %s: %d partitions", name, len(replicas))
        await self._await_leaders(name, range(len(replicas)), timeout_ms)
        return topic_id

    def _check_broker_limits(self, replicas: Mapping[int, list[int]], name: str) -> None:
        """max.broker.partitions, counted per broker over the whole cluster."""
        limit = self.config.max_broker_partitions
        if name.startswith("__"):
            return
        counts: dict[int, int] = {}
        for topic in self.view.topics.values():
            for rs in topic.assignment.replicas.values():
                for b in rs:
                    counts[b] = counts.get(b, 0) + 1
        for rs in replicas.values():
            for b in rs:
                counts[b] = counts.get(b, 0) + 1
                if counts[b] > limit:
                    raise PolicyViolation(
                        f"Broker {b} would hold more than {limit} partitions "
                        "(max.broker.partitions)."
                    )

    def _write_topic(self, name: str, configs: dict[str, str], assignment: Assignment) -> None:
        client = self.session.client
        assert client is not None
        if client.exists(znodes.topic_path(name)):
            raise TopicExists(f"Topic '{name}' already exists.")
        if client.exists(znodes.delete_path(name)):
            raise TopicExists(f"Topic '{name}' is marked for deletion.")
        # Kafka writes the configs first, so no broker sees the topic without them.
        try:
            client.create(znodes.config_path(name), znodes.config_value(configs))
        except NodeExistsError:
            client.set(znodes.config_path(name), znodes.config_value(configs))
        try:
            client.create(znodes.topic_path(name), znodes.assignment_value(assignment))
        except NodeExistsError:
            raise TopicExists(f"Topic '{name}' already exists.") from None

    async def _await_leaders(self, name: str, partitions: range, timeout_ms: int) -> None:
        if timeout_ms <= 0:
            return
        ok = await self.view.wait_until(
            lambda: self.view.leaders_known(name, partitions), timeout_ms / 1000
        )
        if not ok:
            raise RequestTimedOut(
                f"Topic '{name}' was written, but not every partition had a leader after "
                f"{timeout_ms} ms."
            )

    async def delete_topic(self, name: str, timeout_ms: int = 30_000) -> None:
        if name not in self.view.topics:
            raise UnknownTopicOrPartition("This server does not host this topic.")
        client = self.session.client
        assert client is not None
        with contextlib.suppress(NodeExistsError):
            await self.session.run(client.create, znodes.delete_path(name), b"")
        log.info("deletion of topic %s requested", name)
        if timeout_ms > 0:
            gone = await self.view.wait_until(
                lambda: name not in self.view.topics, timeout_ms / 1000
            )
            if not gone:
                raise RequestTimedOut(f"Topic '{name}' is not deleted yet after {timeout_ms} ms.")

    async def create_partitions(
        self,
        name: str,
        total: int,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> None:
        topic = self.view.topics.get(name)
        if topic is None or name in self.view.deleting:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        current = topic.partition_count
        if total <= current:
            raise InvalidPartitions(
                f"Topic currently has {current} partitions, {total} would not be an increase."
            )
        live = [b.node_id for b in self.live_brokers()]
        factor = len(topic.assignment.target(0)) or 1
        if assignments:
            if len(assignments) != total - current:
                raise InvalidPartitions(
                    f"Increasing the number of partitions by {total - current} but "
                    f"{len(assignments)} assignments provided."
                )
            new = {current + i: list(r) for i, r in enumerate(assignments)}
            for r in new.values():
                if [b for b in r if b not in live] or len(r) != factor:
                    raise InvalidReplicationFactor(f"Invalid replica assignment {r}.")
        else:
            if factor > len(live):
                raise InvalidReplicationFactor(
                    f"Replication factor {factor} larger than available brokers {len(live)}."
                )
            first = topic.assignment.replicas.get(0, [live[0]])[0]
            ordered = sorted(live)
            start = ordered.index(first) if first in ordered else -1
            new = rack_unaware(total - current, factor, live, start, current)
        self._check_broker_limits(new, name)
        if validate_only:
            return
        await self.session.run(self._add_partitions, name, new, topic.zk_version)
        log.info("topic %s: %d partitions now", name, total)
        await self._await_leaders(name, range(current, total), timeout_ms)

    def _add_partitions(self, name: str, new: dict[int, list[int]], version: int) -> None:
        client = self.session.client
        assert client is not None
        data, stat = client.get(znodes.topic_path(name))
        assignment = znodes.parse_assignment(data)
        if stat.version != version or any(p in assignment.replicas for p in new):
            raise InvalidPartitions(f"Topic '{name}' was changed meanwhile; try again.")
        assignment.replicas.update(new)
        try:
            client.set(znodes.topic_path(name), znodes.assignment_value(assignment), version)
        except BadVersionError:
            raise InvalidPartitions(f"Topic '{name}' was changed meanwhile; try again.") from None

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's overrides; every broker storing it applies them."""
        if name not in self.view.topics:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        validate_topic_configs(configs)
        await self.session.run(self._write_configs, name, dict(configs))
        await self.view.wait_until(
            lambda: name not in self.view.topics or self.view.topics[name].configs == configs,
            5.0,
        )

    def _write_configs(self, name: str, configs: dict[str, str]) -> None:
        client = self.session.client
        assert client is not None
        try:
            client.set(znodes.config_path(name), znodes.config_value(configs))
        except NoNodeError:
            client.create(znodes.config_path(name), znodes.config_value(configs))
        # Kafka's notification of a config change, for tools that follow it.
        client.create(
            f"{znodes.CONFIG_CHANGES}/config_change_",
            znodes.config_change_value(name),
            sequence=True,
        )

    async def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of a broker (entity: its id) or of the cluster default
        ("<default>") in /config/brokers, with Kafka's change notice; every broker's view
        follows, and each applies its own and the default's."""
        await self.session.run(self._write_broker_configs, entity, dict(configs))
        await self.view.wait_until(
            lambda: self.view.broker_configs.get(entity, {}) == configs, 5.0
        )

    def _write_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        client = self.session.client
        assert client is not None
        path = znodes.broker_config_path(entity)
        try:
            client.set(path, znodes.config_value(configs))
        except NoNodeError:
            client.create(path, znodes.config_value(configs), makepath=True)
        client.create(
            f"{znodes.CONFIG_CHANGES}/config_change_",
            znodes.config_change_value(entity, "brokers"),
            sequence=True,
        )

    async def alter_user_credentials(
        self, changes: list[tuple[str, str, str | None]]
    ) -> None:
        """(user, mechanism, Kafka's credential string, or None to delete), written to
        /config/users as Kafka writes them; every broker's view follows its watches."""
        await self.session.run(self._write_users, changes)
        await self.view.wait_until(
            lambda: all(
                self.view.users.get(user, {}).get(mechanism) == text
                for user, mechanism, text in changes
            ),
            5.0,
        )

    def _write_users(self, changes: list[tuple[str, str, str | None]]) -> None:
        assert self.session.client is not None
        write_users(self.session.client, changes)

    def topic_configs(self, name: str) -> dict[str, str] | None:
        topic = self.view.topics.get(name)
        return None if topic is None else dict(topic.configs)

    async def ensure_offsets_topic(self, timeout_ms: int) -> None:
        """Create __consumer_offsets when the first group needs it, as Kafka's
        FindCoordinator does (offsets.topic.num.partitions, replicas capped to the live
        brokers)."""
        await self._ensure_internal_topic(OFFSETS_TOPIC, "offsets.topic", timeout_ms)

    async def ensure_transaction_topic(self, timeout_ms: int) -> None:
        """Create __transaction_state when the first transactional id needs it
        (transaction.state.log.num.partitions, .replication.factor capped to the live
        brokers, .min.isr, .segment.bytes)."""
        await self._ensure_internal_topic(
            TRANSACTION_TOPIC,
            "transaction.state.log",
            timeout_ms,
            {"min.insync.replicas": self.config.values.get(
                "transaction.state.log.min.isr", "2")},
        )

    async def ensure_schemas_topic(self, timeout_ms: int) -> None:
        """Create _schemas when the schema registry first writes: one partition, as
        Confluent's registry needs, schema.registry.topic.replication.factor replicas
        capped to the live brokers, min.insync.replicas as __transaction_state's."""
        await self._ensure_internal_topic(
            "_schemas",
            "schema.registry.topic",
            timeout_ms,
            {"min.insync.replicas": self.config.values.get(
                "transaction.state.log.min.isr", "2")},
            partitions=1,
        )

    async def _ensure_internal_topic(
        self,
        name: str,
        prefix: str,
        timeout_ms: int,
        extra: Mapping[str, str] | None = None,
        partitions: int | None = None,
    ) -> None:
        if name in self.view.topics:
            return
        config = self.config
        if partitions is None:
            partitions = config.get_int(f"{prefix}.num.partitions")
        factor = min(config.get_int(f"{prefix}.replication.factor"), len(self.live_brokers()))
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": config.values.get(f"{prefix}.segment.bytes", "104857600"),
            **(extra or {}),
        }
        if factor < 2:
            configs.pop("min.insync.replicas", None)
        else:
            wanted = int(configs.get("min.insync.replicas", "1"))
            configs["min.insync.replicas"] = str(min(wanted, factor))
        with contextlib.suppress(TopicExists, RequestTimedOut):
            await self.create_topic(name, partitions, factor, configs, timeout_ms=timeout_ms)

    # -- producer ids, unique over the cluster ------------------------------------------

    async def allocate_producer_id(self) -> int:
        if self._pid_next > self._pid_end:
            await self._refill_producer_ids()
        pid = self._pid_next
        self._pid_next += 1
        if self._pid_end - self._pid_next == PRODUCER_ID_BLOCK // 10:
            # The next block is claimed ahead of need, as Kafka's ProducerIdManager does.
            self._spawn(self._prefetch_producer_ids())
        return pid

    async def _refill_producer_ids(self) -> None:
        async with self._pid_lock:
            if self._pid_next > self._pid_end:
                if self._pid_spare is not None:
                    (self._pid_next, self._pid_end), self._pid_spare = self._pid_spare, None
                else:
                    self._pid_next, self._pid_end = await self.session.run(self._claim_pid_block)

    async def _prefetch_producer_ids(self) -> None:
        async with self._pid_lock:
            if self._pid_spare is None:
                with contextlib.suppress(ZooKeeperUnavailable):
                    self._pid_spare = await self.session.run(self._claim_pid_block)

    def _claim_pid_block(self) -> tuple[int, int]:
        """Kafka's ZooKeeper producer id blocks: the next BLOCK ids after the latest block
        anyone took, claimed by a versioned write."""
        client = self.session.client
        assert client is not None
        while True:
            try:
                data, stat = client.get(znodes.PRODUCER_ID_BLOCK)
            except NoNodeError:
                start, end = 0, PRODUCER_ID_BLOCK - 1
                try:
                    client.create(
                        znodes.PRODUCER_ID_BLOCK,
                        znodes.producer_id_block_value(self.node_id, start, end),
                    )
                except NodeExistsError:
                    continue
                return start, end
            start = znodes.parse_producer_id_block(data) + 1
            end = start + PRODUCER_ID_BLOCK - 1
            try:
                client.set(
                    znodes.PRODUCER_ID_BLOCK,
                    znodes.producer_id_block_value(self.node_id, start, end),
                    stat.version,
                )
            except BadVersionError:
                continue
            return start, end

