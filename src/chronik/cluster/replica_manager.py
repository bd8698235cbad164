"""The replicas this broker stores, as leader or follower (Kafka's ReplicaManager and
Partition).

As leader of a partition it tracks each follower's log end offset from the follower's
Fetch requests, keeps the ISR (a follower that has not caught up for
replica.lag.time.max.ms leaves it; one that reaches the high watermark again rejoins),
writes ISR changes into the partition's state znode (a versioned write, so a controller's
decision made meanwhile wins and is read back), advances the high watermark to the
smallest log end offset of the ISR, and answers acks=all produce requests once the
high watermark covers them. As follower it is fed by a ReplicaFetcher per leader
(chronik.cluster.replica_fetcher), which truncates a divergent tail first.

Roles follow the partition states in the cluster view: `sync` runs after every change
of the view has been stored locally. Handlers serve a partition as its leader only once
this manager has taken up leadership at the view's leader epoch (`leading`), so nothing
is appended under a leadership the replica manager has not set up: no batch without the
leader's epoch, no fetcher from the old leader still running, no follower state missing.
A leadership that cannot be taken up (the leader-epoch checkpoint cannot be written, a
full disk) leaves the partition unserved here and is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NoNodeError

from chronik.cluster import znodes
from chronik.cluster.replication_quota import ReplicationQuotas
from chronik.cluster.znodes import PartitionState
from chronik.protocol import errors
from chronik.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from chronik.cluster.node import ClusterNode
    from chronik.cluster.replica_fetcher import ReplicaFetcher
    from chronik.storage.partition_log import PartitionLog

log = logging.getLogger("chronik.replication")

# ISR changes are logged together after this long.
ISR_NEWS_SECONDS = 0.5
# How long a broker taken out of an ISR for its controlled shutdown is not taken back on
# a fetch (a stray one, sent before it stopped fetching). Bounded, because a leader's view
# cannot always tell that removal from the removal of a broker that died and registered
# again unseen (see _bar_removed); the controller itself keeps a broker in controlled
# shutdown out of every ISR for as long as that lasts.
BAR_SECONDS = 10.0
# A follower's next fetch from a leader that has not yet taken up its leadership.
CATCHING_UP_SECONDS = 0.02
LEADER = "leader"
FOLLOWER = "follower"


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class FollowerState:
    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass
class Replica:
    topic: str
    partition: int
    log: PartitionLog
    role: str = ""
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    isr_version: int = -1
    controller_epoch: int = -1
    assigned: list[int] = field(default_factory=list)
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # Leader: acks=all produces waiting for the high watermark: (offset, future, deadline
    # in loop time); a deadline passed answers REQUEST_TIMED_OUT (ReplicaManager._expire).
    waiters: list[tuple[int, asyncio.Future[int], float]] = field(default_factory=list)
    isr_writing: bool = False
    # Leader of an offline log: writing the ISR without itself, so the controller
    # elects another replica.
    resigning: bool = False
    # Leader: the ISR of a write to ZooKeeper in flight. Until it lands the high
    # watermark counts the members of both (Kafka's maximal ISR, KIP-497): a joining
    # follower may already be in ZooKeeper's ISR, so it must hold what is acknowledged.
    pending_isr: tuple[int, ...] | None = None
    # Follower: truncate (OffsetForLeaderEpoch) before the next fetch.
    needs_truncation: bool = False
    paused_until: float = 0.0  # follower: no fetch before this (monotonic seconds)
    leader_hw: int = -1  # follower: the leader's high watermark last seen
    epoch_start_offset: int = 0  # leader: its log end offset when its epoch began
    # Leader: brokers the controller took out of the ISR while they stayed registered
    # (a controlled shutdown): broker -> (the broker epoch it had, until when, monotonic
    # seconds). None is taken back on a fetch before then, unless it registered again.
    barred: dict[int, tuple[int, float]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


class ReplicaManager:
    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.node_id = node.node_id
        config = node.config
        self.lag_max_ms = config.replica_lag_time_max_ms
        self.fetchers_per_leader = config.num_replica_fetchers
        self.backoff = max(config.replica_fetch_backoff_ms / 1000, 0.05)
        self.replicas: dict[tuple[str, int], Replica] = {}
        self._by_log: dict[int, Replica] = {}
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._changed = asyncio.Event()
        self._isr_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._stopping = False
        self._news: dict[str, list[str]] = {}
        self._isr_news: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = []
        self._isr_news_flush: asyncio.TimerHandle | None = None
        self._retry: asyncio.TimerHandle | None = None
        # One timer for every acks=all waiter's deadline, not one per produce: it fires at
        # the earliest deadline it knows of, answers the waiters past theirs and is set
        # again for the earliest left.
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = 0.0
        self._waiting: dict[int, Replica] = {}  # id -> a replica with waiters
        self._failed_roles: set[tuple[str, int]] = set()  # logged once until taken up
        # Replication throttles: their settings come with the view (from start()).
        self.quotas = ReplicationQuotas(self.node_id)
        # False from a controlled shutdown on: this broker fetches from no leader.
        self._fetching = True

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        view = self.node.view
        self.quotas.follow(view)
        view.subscribe(lambda: self.quotas.follow(view))
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_checks())

    async def stop(self) -> None:
        self._stopping = True
        for timer in (self._retry, self._isr_news_flush, self._expiry):
            if timer is not None:
                timer.cancel()
        self._flush_isr_news()
        for replica in self.replicas.values():
            self._fail_waiters(replica, errors.NOT_LEADER_OR_FOLLOWER)
        tasks = [f.stop() for f in self._fetchers.values()]
        self._fetchers.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in [self._isr_task, *self._tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- roles follow the view --------------------------------------------------------------

    def sync(self) -> None:
        """Take up the role the cluster view gives each locally stored partition."""
        if self._stopping:
            return
        view = self.node.view
        catalog = self.node.catalog
        seen: set[tuple[str, int]] = set()
        for topic in view.topics.values():
            local = catalog.get(topic.name)
            if local is None or local.topic_id != topic.assignment.topic_id:
                continue
            for partition, assigned in topic.assignment.replicas.items():
                if self.node_id not in assigned:
                    continue
                plog = local.log(partition)
                state = topic.states.get(partition)
                if plog is None or plog.closed or state is None:
                    continue
                key = (topic.name, partition)
                seen.add(key)
                replica = self.replicas.get(key)
                if replica is None or replica.log is not plog:
                    if replica is not None:
                        self._drop(replica)
                    replica = Replica(topic.name, partition, plog)
                    self.replicas[key] = replica
                    self._by_log[id(plog)] = replica
                    plog.on_offline = self._log_offline
                replica.assigned = list(assigned)
                try:
                    self._follow_state(replica, state)
                except Exception:
                    # One partition's failure must not leave the others' roles behind.
                    log.exception("%s: cannot take up its role; trying again", replica.name)
                    self._step_aside(replica)
                    self._retry_soon()
        for key in [k for k in self.replicas if k not in seen]:
            self._drop(self.replicas.pop(key))
        # One line per kind of change, however many partitions it touched.
        for what, names in sorted(self._news.items()):
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            log.info("broker %d now %s %d partitions (%s%s)", self.node_id, what, len(names),
                     ", ".join(names[:5]), more)
        self._news.clear()
        self._arrange_fetchers()
        self._changed.set()
        self._changed = asyncio.Event()

    def _follow_state(self, replica: Replica, state: PartitionState) -> None:
        replica.controller_epoch = state.controller_epoch
        if state.leader == self.node_id:
            if replica.role != LEADER or replica.leader_epoch != state.leader_epoch:
                if replica.role == FOLLOWER:
                    # Handed the partition by a leader still registered: it is leaving.
                    if replica.leader_id in replica.isr and replica.leader_id not in state.isr:
                        self._bar(replica, replica.leader_id)
                elif replica.role == LEADER:
                    self._bar_removed(replica, state)
                self._become_leader(replica, state)
            else:
                self._follow_assignment(replica)
                if state.zk_version > replica.isr_version:
                    self._bar_removed(replica, state)
                    replica.isr, replica.isr_version = state.isr, state.zk_version
                    self._maybe_advance_hw(replica)
            return
        if (
            replica.role != FOLLOWER
            or replica.leader_id != state.leader
            or replica.leader_epoch != state.leader_epoch
        ):
            self._become_follower(replica, state)
        replica.isr, replica.isr_version = state.isr, state.zk_version

    def _follow_assignment(self, replica: Replica) -> None:
        """As leader: a reassignment added replicas (they fetch from now on, out of the
        ISR until caught up) or removed them (their fetches count no more)."""
        wanted = {b for b in replica.assigned if b != self.node_id}
        if wanted == replica.followers.keys():
            return
        for broker in [b for b in replica.followers if b not in wanted]:
            del replica.followers[broker]
        for broker in wanted - replica.followers.keys():
            replica.followers[broker] = FollowerState(last_caught_up_ms=0)
        self._maybe_advance_hw(replica)

    def _bar_removed(self, replica: Replica, state: PartitionState) -> None:
        """As leader: bar the members that a state this leader did not write took out of
        the ISR. Besides the leader only the controller writes the state, and it takes a
        registered broker out only for its controlled shutdown; a dead one it takes out
        once its registration is gone, so a view that has not seen that yet bars it by
        the broker epoch its next registration will not have. (A broker that died and
        registered again before this view saw it go is barred wrongly: for BAR_SECONDS.)"""
        mine = replica.pending_isr if replica.pending_isr is not None else replica.isr
        for broker in set(replica.isr) & set(mine) - set(state.isr):
            self._bar(replica, broker)

    def _bar(self, replica: Replica, broker: int) -> None:
        info = self.node.view.brokers.get(broker)
        if info is not None and broker != self.node_id:
            replica.barred[broker] = (info.epoch, time.monotonic() + BAR_SECONDS)

    def _become_leader(self, replica: Replica, state: PartitionState) -> None:
        plog = replica.log
        # The epoch checkpoint first: if it cannot be written nothing has changed yet, and
        # this broker neither serves the partition nor counts anyone's fetches for it.
        try:
            plog.epochs.assign(state.leader_epoch, plog.end_offset)
        except OSError as exc:
            if replica.key not in self._failed_roles:
                self._failed_roles.add(replica.key)
                log.error("%s: cannot lead it at epoch %d: leader-epoch checkpoint not "
                          "written (%s); trying again", replica.name, state.leader_epoch,
                          exc.strerror or exc)
            self._step_aside(replica)
            self._retry_soon()
            return
        if self._failed_roles:
            self._failed_roles.discard(replica.key)
        was = replica.role
        now = _now_ms()
        followers: dict[int, FollowerState] = {}
        for broker in replica.assigned:
            if broker == self.node_id:
                continue
            old = replica.followers.get(broker) if was == LEADER else None
            # Kafka starts the clock of every ISR member at the moment of leadership.
            followers[broker] = old or FollowerState(
                last_caught_up_ms=now if broker in state.isr else 0
            )
        replica.followers = followers
        replica.leader_id = self.node_id
        replica.leader_epoch = state.leader_epoch
        replica.isr, replica.isr_version = state.isr, state.zk_version
        replica.pending_isr = None
        replica.needs_truncation = False
        replica.epoch_start_offset = plog.end_offset
        plog.replicated = True
        plog.leader_epoch = state.leader_epoch
        replica.role = LEADER
        replica.resigning = False
        if plog.offline is not None:
            self._log_offline(plog)
        if was == FOLLOWER:  # a failover; new partitions' first roles are not news
            self._news.setdefault("leads", []).append(replica.name)
            log.debug(
                "%s: leader at epoch %d (log end %d, high watermark %d, isr %s)",
                replica.name, state.leader_epoch, plog.end_offset, plog.high_watermark,
                list(state.isr),
            )
        self._maybe_advance_hw(replica)
        self.node.wake_fetches(plog)

    def _log_offline(self, plog: PartitionLog) -> None:
        """A log of this broker went offline (an fsync failed): as leader, hand the
        partition on. Kafka's controller moves the leadership of a failed log
        directory's partitions; here the leader writes the ISR without itself, and the
        controller elects one of the others (all hold what was acknowledged). With no
        other ISR member there is nobody to hand it to: it stays, taking no writes."""
        replica = self._by_log.get(id(plog))
        if replica is None or replica.role != LEADER:
            return
        if not [b for b in replica.isr if b != self.node_id]:
            log.error("%s: offline, and no other in-sync replica to lead it", replica.name)
            return
        log.error("%s: offline; handing its leadership to another in-sync replica",
                  replica.name)
        replica.resigning = True
        self._resign(replica)

    def _resign(self, replica: Replica) -> None:
        others = tuple(b for b in replica.isr if b != self.node_id)
        if others and self.node_id in replica.isr:
            self._propose_isr(replica, others)

    def _step_aside(self, replica: Replica) -> None:
        """Neither leader nor follower: requests for the partition are refused here until
        its role can be taken up."""
        self._fail_waiters(replica, errors.NOT_LEADER_OR_FOLLOWER)
        replica.role = ""
        replica.leader_epoch = -1
        replica.followers = {}
        replica.pending_isr = None
        replica.log.leader_epoch = -1
        self.node.wake_fetches(replica.log)

    def _retry_soon(self) -> None:
        if self._retry is None and not self._stopping:
            self._retry = asyncio.get_running_loop().call_later(self.backoff * 10,
                                                                self._retry_sync)

    def _retry_sync(self) -> None:
        self._retry = None
        self.sync()

    def _become_follower(self, replica: Replica, state: PartitionState) -> None:
        self._fail_waiters(replica, errors.NOT_LEADER_OR_FOLLOWER)
        if replica.role == LEADER:
            self._news.setdefault(f"follows broker {state.leader} for", []).append(replica.name)
        replica.role = FOLLOWER
        replica.leader_id = state.leader
        replica.leader_epoch = state.leader_epoch
        replica.followers = {}
        replica.needs_truncation = True
        replica.paused_until = 0.0
        replica.log.replicated = True
        replica.log.leader_epoch = -1
        # Wakes fetches waiting on it: they find this broker no longer leads it.
        self.node.wake_fetches(replica.log)

    def _drop(self, replica: Replica) -> None:
        self._fail_waiters(replica, errors.NOT_LEADER_OR_FOLLOWER)
        self._by_log.pop(id(replica.log), None)
        replica.role = ""

    def _arrange_fetchers(self) -> None:
        from chronik.cluster.replica_fetcher import ReplicaFetcher

        wanted: set[tuple[int, int]] = set()
        for replica in self.replicas.values():
            if replica.role == FOLLOWER and replica.leader_id >= 0 and self._fetching:
                wanted.add(self._fetcher_key(replica))
        for key in [k for k in self._fetchers if k not in wanted]:
            self._spawn(self._fetchers.pop(key).stop())
        for key in sorted(wanted - set(self._fetchers)):
            fetcher = ReplicaFetcher(self, key[0], key[1])
            self._fetchers[key] = fetcher
            fetcher.start()

    async def stop_fetching(self) -> None:
        """Controlled shutdown: fetch from no leader from now on, so that no fetch of this
        broker's asks a leader to take it back into an ISR it is leaving."""
        self._fetching = False
        stops = [f.stop() for f in self._fetchers.values()]
        self._fetchers.clear()
        await asyncio.gather(*stops, return_exceptions=True)

    def resume_fetching(self) -> None:
        """Between attempts of a controlled shutdown that failed: follow the leaders again,
        so the partitions whose ISR this broker is still in are not held back by it."""
        self._fetching = True
        self._arrange_fetchers()

    def _fetcher_key(self, replica: Replica) -> tuple[int, int]:
        return replica.leader_id, hash(replica.key) % self.fetchers_per_leader

    def fetch_set(self, leader_id: int, index: int) -> list[Replica]:
        """The follower replicas a fetcher pulls from ``leader_id``."""
        return [
            r for r in self.replicas.values()
            if r.role == FOLLOWER and self._fetcher_key(r) == (leader_id, index)
        ]

    async def wait_changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    # -- follower: what the fetcher brings ----------------------------------------------

    def pause(self, replica: Replica, code: int = errors.NONE) -> None:
        """No fetch for this partition until the backoff has passed or the view changes.
        A leader that does not yet know the epoch this follower has from the view
        (UNKNOWN_LEADER_EPOCH), or does not yet lead (NOT_LEADER_OR_FOLLOWER), is only
        behind in reading the same ZooKeeper news, by milliseconds: it is asked again
        after CATCHING_UP_SECONDS, not after replica.fetch.backoff.ms, or every acks=all
        write to a partition that just moved would wait out the backoff."""
        wait = self.backoff
        if code in (errors.UNKNOWN_LEADER_EPOCH, errors.NOT_LEADER_OR_FOLLOWER):
            wait = min(wait, CATCHING_UP_SECONDS)
        replica.paused_until = time.monotonic() + wait

    def fetched(
        self, replica: Replica, code: int, records: bytes | memoryview | None, leader_hw: int,
        leader_start: int, now_ms: int,
    ) -> None:
        plog = replica.log
        if code == errors.OFFSET_OUT_OF_RANGE:
            if 0 <= plog.end_offset < leader_start:
                log.info("%s: the leader starts at %d, after this log's end %d: starting over "
                         "there", replica.name, leader_start, plog.end_offset)
                plog.start_over_at_leader_start(leader_start)
            else:
                replica.needs_truncation = True
            return
        if code != errors.NONE:
            log.debug("%s: fetch from broker %d: error %d", replica.name, replica.leader_id, code)
            self.pause(replica, code)
            return
        if records:
            try:
                plog.append_replicated(records, now_ms)
            except KafkaStorageError:
                self.pause(replica)  # logged once by the partition
                return
            except ValueError as exc:
                log.warning("%s: the leader's records do not fit this log: %s; truncating "
                            "again", replica.name, exc)
                replica.needs_truncation = True
                self.pause(replica)
                return
        replica.leader_hw = leader_hw
        if plog.set_high_watermark(min(leader_hw, plog.end_offset)):
            # What this replica may serve grew (its readers of internal topics follow it).
            self.node.wake_fetches(plog, followers=False)
        if plog.start_offset < leader_start <= plog.end_offset:
            with contextlib.suppress(Exception):
                plog.delete_records(leader_start)

    # -- leader: followers' fetches, ISR, high watermark ----------------------------------

    def follower_fetch(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int,
        current_leader_epoch: int,
    ) -> int:
        """A follower fetches ``fetch_offset``: its log end offset. Returns the error code
        for its partition; only a fetch at a valid offset counts for the ISR and the high
        watermark (Kafka updates a follower's state from a read that succeeded)."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.role != LEADER:
            return errors.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch >= 0:
            if current_leader_epoch < replica.leader_epoch:
                return errors.FENCED_LEADER_EPOCH
            if current_leader_epoch > replica.leader_epoch:
                return errors.UNKNOWN_LEADER_EPOCH
        follower = replica.followers.get(replica_id)
        if follower is None:
            return errors.REPLICA_NOT_AVAILABLE
        plog = replica.log
        leo = plog.end_offset
        if fetch_offset > leo:
            # A log longer than the leader's has a tail to truncate: it holds nothing the
            # leader can vouch for, so it neither joins the ISR nor moves the high watermark.
            return errors.OFFSET_OUT_OF_RANGE
        if fetch_offset < plog.start_offset:
            return errors.NONE  # the read answers OFFSET_OUT_OF_RANGE with the log start
        now = _now_ms()
        # Kafka's Replica.updateFetchState: caught up to the leader's end now, or to the
        # end it had at the previous fetch.
        if fetch_offset >= leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now)
        elif fetch_offset >= follower.last_fetch_leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_leader_leo = leo
        follower.last_fetch_ms = now
        follower.leo = fetch_offset
        if (
            replica_id not in replica.isr
            and not replica.isr_writing
            and self._may_join_isr(replica, replica_id, follower)
        ):
            self._propose_isr(replica, (*replica.isr, replica_id))
        self._maybe_advance_hw(replica)
        return errors.NONE

    def leader_throttled(self, topic: str, partition: int, replica_id: int) -> bool:
        """A follower's fetch gets no records of this partition now (its throttle)."""
        return self.quotas.leader_holds_back(
            self.replicas.get((topic, partition)), topic, partition, replica_id
        )

    def _may_join_isr(self, replica: Replica, broker: int, follower: FollowerState) -> bool:
        if replica.resigning:
            return False
        # Kafka's isFollowerInSync: at the high watermark, and holding everything of
        # earlier epochs (so it has truncated whatever diverged); and, as KIP-841 has it,
        # a broker registered in the cluster: the controller takes out of the ISR at
        # once any broker that is not, so adding one would only flap. Nor one the
        # controller took out for its controlled shutdown (a stray fetch of a broker
        # stopping), until it registers again.
        info = self.node.view.brokers.get(broker)
        if info is None:
            return False
        bar = replica.barred.get(broker)
        if bar is not None:
            if bar[0] == info.epoch and time.monotonic() < bar[1]:
                return False
            del replica.barred[broker]
        return (
            follower.leo >= replica.log.high_watermark
            and follower.leo >= replica.epoch_start_offset
        )

    def leader_appended(self, plog: Any) -> None:
        replica = self._by_log.get(id(plog))
        if replica is not None and replica.role == LEADER:
            self._maybe_advance_hw(replica)

    def _maybe_advance_hw(self, replica: Replica) -> None:
        if replica.role != LEADER:
            return
        plog = replica.log
        low = plog.end_offset
        members = set(replica.isr) | set(replica.pending_isr or ())
        for broker in members:
            if broker == self.node_id:
                continue
            follower = replica.followers.get(broker)
            # A member this leader has no state for has been seen by nobody: it holds
            # nothing yet, as far as the high watermark is concerned.
            low = min(low, follower.leo if follower is not None else -1)
        if low >= 0 and plog.set_high_watermark(low):
            self._release_waiters(replica)
            # Consumers may read further; followers read to the log end, not to this.
            self.node.wake_fetches(plog, followers=False)

    def _release_waiters(self, replica: Replica) -> None:
        if not replica.waiters:
            return
        hw = replica.log.high_watermark
        keep = []
        for waiter in replica.waiters:
            if waiter[0] <= hw:
                fut = waiter[1]
                if not fut.done():
                    fut.set_result(errors.NONE)
            else:
                keep.append(waiter)
        replica.waiters = keep

    def _fail_waiters(self, replica: Replica, code: int) -> None:
        for _, fut, _ in replica.waiters:
            if not fut.done():
                fut.set_result(code)
        replica.waiters = []

    def _add_waiter(self, replica: Replica, offset: int, timeout: float) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        deadline = loop.time() + timeout
        replica.waiters.append((offset, fut, deadline))
        self._waiting[id(replica)] = replica
        if self._expiry is None or deadline < self._expiry_at:
            if self._expiry is not None:
                self._expiry.cancel()
            self._expiry_at = deadline
            self._expiry = loop.call_at(deadline, self._expire)
        return fut

    def _expire(self) -> None:
        """Answer REQUEST_TIMED_OUT to the waiters past their deadline; set the timer
        again for the earliest deadline left."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest = None
        for key, replica in list(self._waiting.items()):
            keep = []
            for waiter in replica.waiters:
                fut, deadline = waiter[1], waiter[2]
                if fut.done():
                    continue
                if deadline <= now:
                    fut.set_result(errors.REQUEST_TIMED_OUT)
                    continue
                keep.append(waiter)
                if earliest is None or deadline < earliest:
                    earliest = deadline
            replica.waiters = keep
            if not keep:
                del self._waiting[key]
        if earliest is not None and not self._stopping:
            self._expiry_at = earliest
            self._expiry = loop.call_at(earliest, self._expire)

    async def _isr_checks(self) -> None:
        interval = max(self.lag_max_ms / 2000, 0.05)
        while not self._stopping:
            await asyncio.sleep(interval)
            now = _now_ms()
            for replica in list(self.replicas.values()):
                if replica.role != LEADER or replica.isr_writing:
                    continue
                if replica.resigning:
                    self._resign(replica)  # again, if a write of its was refused
                    continue
                out = [
                    b for b in replica.isr
                    if b != self.node_id and self._lagging(replica, b, now)
                ]
                if out:
                    keep = tuple(b for b in replica.isr if b not in out)
                    self._propose_isr(replica, keep)

    def _lagging(self, replica: Replica, broker: int, now: int) -> bool:
        follower = replica.followers.get(broker)
        if follower is None:
            return False
        if follower.leo >= replica.log.end_offset:
            return False  # caught up, even if it has not fetched for a while
        return now - follower.last_caught_up_ms > self.lag_max_ms

    def _propose_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """Start writing a new ISR, unless a write is already out. Claimed here, where it
        is proposed, not when the task starts: fetches meanwhile propose nothing."""
        if replica.isr_writing or replica.role != LEADER or set(isr) == set(replica.isr):
            return
        replica.isr_writing = True
        replica.pending_isr = isr
        self._spawn(self._write_isr(
            replica, isr, replica.isr, replica.isr_version, replica.leader_epoch
        ))

    async def _write_isr(
        self, replica: Replica, isr: tuple[int, ...], old: tuple[int, ...], version: int,
        epoch: int,
    ) -> None:
        """Write ``isr`` into the partition's state znode, as the leader at ``epoch``,
        conditional on ``version``, the znode version this leader saw when it proposed
        the change (Kafka's updateLeaderAndIsr): a change the controller made meanwhile
        (a dead broker removed) is never written over; it is taken up instead and the
        ISR judged again from it."""
        try:
            outcome = await self.node.session.run(
                self._write_isr_znode, replica.topic, replica.partition,
                PartitionState(self.node_id, epoch, isr, replica.controller_epoch), version,
            )
        except Exception as exc:
            log.debug("%s: ISR %s not written: %s", replica.name, list(isr), exc)
            outcome = None
        finally:
            replica.isr_writing = False
            replica.pending_isr = None
        if outcome is None or replica.role != LEADER or replica.leader_epoch != epoch:
            self._maybe_advance_hw(replica)
            return
        written, current = outcome
        if (
            current.zk_version > replica.isr_version
            and current.leader == self.node_id
            and current.leader_epoch == epoch
        ):
            replica.isr, replica.isr_version = current.isr, current.zk_version
        if written:
            # The watch of this very write may have brought ``isr`` in already; the
            # change made is still old -> isr.
            if len(isr) < len(old):
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
            self._isr_news.append((replica.name, old, isr))
            if self._isr_news_flush is None:
                self._isr_news_flush = asyncio.get_running_loop().call_later(
                    ISR_NEWS_SECONDS, self._flush_isr_news
                )
        else:
            log.debug("%s: ISR %s not written: the state changed meanwhile (now %s)",
                      replica.name, list(isr), list(current.isr))
        self._maybe_advance_hw(replica)

    def _flush_isr_news(self) -> None:
        """ISR changes logged together: one line per distinct change, naming its
        partitions (a broker rejoining changes many at once)."""
        self._isr_news_flush = None
        news, self._isr_news = self._isr_news, []
        by_change: dict[tuple[tuple[int, ...], tuple[int, ...]], list[str]] = {}
        for name, old, new in news:
            by_change.setdefault((old, new), []).append(name)
        for (old, new), names in by_change.items():
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            log.info("ISR %s -> %s for %d partitions (%s%s)", list(old), list(new),
                     len(names), ", ".join(names[:5]), more)

    def _write_isr_znode(
        self, topic: str, partition: int, new: PartitionState, version: int
    ) -> tuple[bool, PartitionState] | None:
        """On a ZooKeeper thread: set the state znode to ``new`` if its version is still
        ``version``. (written, the state now in ZooKeeper), or None when the znode is
        gone."""
        client = self.node.session.client
        assert client is not None
        path = znodes.state_path(topic, partition)
        try:
            stat = client.set(path, znodes.state_value(new), version)
            return True, dataclasses.replace(new, zk_version=stat.version)
        except BadVersionError:
            pass
        except NoNodeError:
            return None
        try:
            data, stat = client.get(path)
        except NoNodeError:
            return None
        return False, znodes.parse_state(data, stat.version)

    # -- leader: acks=all ------------------------------------------------------------------

    def not_enough_replicas(self, topic: str, partition: int) -> str | None:
        """Why an acks=all append is refused before it is made (Kafka's
        NOT_ENOUGH_REPLICAS), or None."""
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return None
        wanted = replica.log.config.min_insync_replicas
        if len(replica.isr) < wanted:
            return (
                f"The size of the current ISR {list(replica.isr)} is insufficient to satisfy "
                f"the min.isr requirement of {wanted} for partition {replica.name}"
            )
        return None

    async def wait_replicated(
        self, topic: str, partition: int, offset: int, timeout: float
    ) -> tuple[int, str | None]:
        """Wait until the high watermark reaches ``offset`` (every ISR member has what is
        below it); the error code and message for the produce."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.role != LEADER:
            return errors.NOT_LEADER_OR_FOLLOWER, None
        if replica.log.high_watermark < offset:
            # This waiter's own future: cancelling the produce touches no other waiter.
            code = await self._add_waiter(replica, offset, timeout)
            if code == errors.REQUEST_TIMED_OUT:
                return code, (
                    f"{replica.name}: not replicated to the ISR {list(replica.isr)} in time"
                )
            if code != errors.NONE:
                return code, None
        if not self.node.lease_held():
            # Its ZooKeeper session may be gone, and the partition given to another
            # broker: nothing is acknowledged as its leader.
            return errors.NOT_LEADER_OR_FOLLOWER, None
        wanted = replica.log.config.min_insync_replicas
        if len(replica.isr) < wanted:
            return errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
                f"The size of the current ISR {list(replica.isr)} is insufficient to satisfy "
                f"the min.isr requirement of {wanted} for partition {replica.name}"
            )
        return errors.NONE, None

    def lease_lost(self) -> None:
        """This broker's ZooKeeper session expired: produce requests waiting for their
        replication are answered NOT_LEADER_OR_FOLLOWER (the client asks for the leader
        again), as no acknowledgement comes from a broker whose partitions may have been
        given to another."""
        for replica in self.replicas.values():
            self._fail_waiters(replica, errors.NOT_LEADER_OR_FOLLOWER)

    # -- what handlers, metrics and tools ask -------------------------------------------------

    def leading(self, topic: str, partition: int, leader_epoch: int) -> PartitionLog | None:
        """The log of a partition the view says this broker leads at ``leader_epoch``, if
        its leadership is taken up, else None (a follower the view has just made leader
        serves nothing until it takes the leadership up).

        A leader whose epoch the view has raised while it stays the leader (a reassignment
        completed, fencing the replicas it removed) goes on leading at the epoch it has
        until it takes the new one up, as Kafka's leader does until its LeaderAndIsr
        request arrives: it is what it served a moment before the view changed. Refusing
        it for that moment would answer one batch of an idempotent producer's pipeline
        NOT_LEADER_OR_FOLLOWER, unwritten, and the next, checked once the new epoch is
        taken up, OUT_OF_ORDER_SEQUENCE_NUMBER; librdkafka answers that with a new
        producer epoch, sending again under it every batch not yet acknowledged on any
        partition, also those written whose answer a leader move lost: stored twice."""
        replica = self.replicas.get((topic, partition))
        if (
            replica is None
            or replica.role != LEADER
            or replica.leader_epoch > leader_epoch
            or replica.log.closed
        ):
            return None
        return replica.log

    def is_leader(self, topic: str, partition: int) -> bool:
        replica = self.replicas.get((topic, partition))
        return replica is not None and replica.role == LEADER

    def under_replicated(self) -> int:
        return sum(
            1 for r in self.replicas.values()
            if r.role == LEADER and len(r.isr) < len(r.assigned)
        )

    def max_lag(self) -> int:
        lag = 0
        for replica in self.replicas.values():
            if replica.role == FOLLOWER and replica.leader_hw >= 0:
                lag = max(lag, replica.leader_hw - replica.log.end_offset)
        return lag
