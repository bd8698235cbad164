"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and friends.

Modelled on Kafka's GroupCoordinator (core/.../coordinator/group). JoinGroup and
SyncGroup answers are futures completed when the rebalance gets there; session and
rebalance timeouts are timers on the broker's event loop. Committed offsets and group
metadata are kept in memory and persisted as records of __consumer_offsets through
a GroupStore, which replays them at start; the offsets themselves are CommittedOffsets'.

Like Kafka's GroupMetadataManager, the coordinator serves the groups of the
__consumer_offsets partitions it has loaded: all of them on a single node, in a cluster
those this broker leads (load_partition / unload_partition as leadership comes and goes).
Every API asks coordinator_error(group) first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from chronik.coordinator.committed_offsets import CommitRequest, CommittedOffsets, FetchedOffset
from chronik.coordinator.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from chronik.coordinator.host import ClusterPartitions, CoordinatorHost
from chronik.coordinator.offsets_codec import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    encode_group_value,
    encode_key,
    partition_for,
)
from chronik.coordinator.offsets_topic import (
    TOPIC,
    GroupStore,
    OffsetsTopic,
    Record,
    store_error,
)
from chronik.records.control import COMMIT

log = logging.getLogger(__name__)

E = ErrorCode
NONE = int(E.none)
NOT_COORDINATOR = int(E.not_coordinator)
LOAD_IN_PROGRESS = int(E.coordinator_load_in_progress)

# Broker configs (Kafka's names) and the defaults used when the broker has none. Kafka
# delays a first rebalance by 3 s to gather members; 300 ms still gathers consumers
# started together, so they do not wait for each other's next heartbeat (3 s).
DEFAULTS = {
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "300",
    "offset.metadata.max.bytes": "4096",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
}

@dataclass(slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupSummary:
    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


def _config_values(broker: CoordinatorHost) -> dict[str, str]:
    config = getattr(broker, "config", None)
    if not isinstance(config, Mapping):
        config = getattr(config, "values", None)  # the broker's BrokerConfig
    return dict(config) if isinstance(config, Mapping) else {}


class GroupCoordinator:
    def __init__(
        self,
        broker: CoordinatorHost,
        store: GroupStore | None = None,
        topic_partitions: Callable[[str], int | None] | None = None,
    ) -> None:
        self.broker = broker
        config: Mapping[str, str] = {**DEFAULTS, **_config_values(broker)}
        self.min_session_ms = int(config["group.min.session.timeout.ms"])
        self.max_session_ms = int(config["group.max.session.timeout.ms"])
        self.initial_delay_ms = int(config["group.initial.rebalance.delay.ms"])
        self.retention_check_ms = int(config["offsets.retention.check.interval.ms"])
        if store is None:
            store = OffsetsTopic(broker, config)
        self.store = store
        self._topic_partitions = topic_partitions or self._partitions_of
        self.groups: dict[str, Group] = {}
        # __consumer_offsets partitions served, and those being loaded (each with a
        # future its load completes, so a second load_partition waits for the first).
        self._loaded: set[int] = set()
        self._loading: dict[int, asyncio.Future[None]] = {}
        self._offsets_count: int | None = None  # partitions of __consumer_offsets, last seen
        # Producer id -> groups holding offsets of its open transaction, so a marker finds
        # them without scanning every group.
        self._txn_groups: dict[int, set[str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retention_timer: asyncio.TimerHandle | None = None
        self._running = False
        self._closing = False
        self.offsets = CommittedOffsets(
            self.groups,
            store,
            self._topic_partitions,
            self._spawn,
            int(config["offset.metadata.max.bytes"]),
            int(config["offsets.retention.minutes"]) * 60_000,
        )

    # ---------------------------------------------------------------- lifecycle

    def _cluster(self) -> ClusterPartitions | None:
        return getattr(self.broker, "cluster", None)

    async def start(self) -> None:
        """A single node loads every partition now; in a cluster the broker loads those
        it leads, as it learns it leads them."""
        if self._cluster() is None:
            self._replay(await self.store.replay(), self.groups, self._txn_groups)
            count = self._partition_count()
            if count:
                self._loaded.update(range(count))
            # A topic deleted just before a crash may still have offsets in the log. (In a
            # cluster Kafka's coordinator too only forgets topics deleted while it runs.)
            topics = {t for g in self.groups.values() for t, _ in g.offsets}
            for topic in topics:
                if self._topic_partitions(topic) is None:
                    task = self.on_topic_deleted(topic)
                    if task is not None:
                        await task
        self._running = True
        self._schedule_retention()

    # ---------------------------------------------------------------- ownership

    def _partition_count(self) -> int | None:
        cluster = self._cluster()
        if cluster is not None:
            count = cluster.partition_count(TOPIC)
        else:
            count = getattr(self.store, "num_partitions", None)
        if count:
            self._offsets_count = count
        return count

    def coordinator_error(self, group_id: str) -> int | None:
        """None when this coordinator serves the group; COORDINATOR_LOAD_IN_PROGRESS while
        its partition is being loaded; NOT_COORDINATOR when that partition is not ours
        (Kafka's validateGroupStatus). A single node serves every group."""
        if self._cluster() is None:
            return None
        count = self._partition_count()
        if not count:
            return NOT_COORDINATOR
        partition = partition_for(group_id, count)
        if partition in self._loading:
            return LOAD_IN_PROGRESS
        if partition not in self._loaded:
            return NOT_COORDINATOR
        return None

    def listing_error(self) -> int:
        """ListGroups' error: groups of a partition being loaded are not listed yet."""
        return LOAD_IN_PROGRESS if self._loading else NONE

    async def load_partition(self, partition: int) -> None:
        """Replay one partition's groups and offsets from its local log, then serve them
        (GroupMetadataManager.loadGroupsForPartition)."""
        if partition in self._loaded:
            return
        pending = self._loading.get(partition)
        if pending is not None:
            await asyncio.shield(pending)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loading[partition] = done
        self._partition_count()  # remembered, to unload even once the topic is gone
        try:
            loaded: dict[str, Group] = {}
            replay = getattr(self.store, "replay_partition", None)
            if replay is not None:
                records = await replay(partition)
            else:
                records = [r for r in await self.store.replay() if self._in(r[0], partition)]
            txn_groups: dict[int, set[str]] = {}
            self._replay(records, loaded, txn_groups)
            # Unloaded (or unloaded and loaded again) meanwhile: this replay is stale.
            if self._loading.get(partition) is done:
                self.groups.update(loaded)
                for pid, ids in txn_groups.items():
                    self._txn_groups.setdefault(pid, set()).update(ids)
                self._loaded.add(partition)
                # One line per partition that has groups; 50 empty ones say nothing.
                (log.info if loaded else log.debug)(
                    "%s-%d: loaded %d groups", TOPIC, partition, len(loaded)
                )
        except Exception as exc:
            # The partition stays unserved (NOT_COORDINATOR); one line, no traceback storm.
            log.error("%s-%d: groups not loaded: %s", TOPIC, partition, exc)
        finally:
            if self._loading.get(partition) is done:
                del self._loading[partition]
            done.set_result(None)

    def _in(self, key_bytes: bytes, partition: int) -> bool:
        count = self._offsets_count or self._partition_count()
        try:
            return bool(count) and partition_for(decode_key(key_bytes).group, count) == partition
        except ValueError:
            return False

    def is_loaded(self, partition: int) -> bool:
        """Whether the partition's state is loaded and served here."""
        return partition in self._loaded

    def unload_partition(self, partition: int) -> None:
        """Forget the groups of a partition this broker no longer leads: held JoinGroup and
        SyncGroup requests are answered NOT_COORDINATOR and their timers stop, as in
        Kafka's onGroupUnloaded. Their records stay in the log for the next leader."""
        self._loading.pop(partition, None)
        self._loaded.discard(partition)
        count = self._partition_count() or self._offsets_count
        if not count:
            return
        unloaded = [g for g in self.groups if partition_for(g, count) == partition]
        for group_id in unloaded:
            group = self.groups.pop(group_id)
            self._cancel_timers(group)
            group.state = GroupState.DEAD
            for member in group.members.values():
                self._finish_futures(member, NOT_COORDINATOR)
        (log.info if unloaded else log.debug)(
            "%s-%d: %d groups unloaded", TOPIC, partition, len(unloaded)
        )

    def release_waiters(self) -> None:
        """Answer every held JoinGroup/SyncGroup with NOT_COORDINATOR, as Kafka does when
        it unloads a group, so a shutting-down broker need not wait out rebalance timeouts.
        Members find the coordinator again once the broker is back."""
        self._closing = True
        for group in self.groups.values():
            self._cancel_timers(group)
            for member in group.members.values():
                self._finish_futures(member, int(E.not_coordinator))

    async def stop(self) -> None:
        self._running = False
        if self._retention_timer is not None:
            self._retention_timer.cancel()
        self.release_waiters()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _replay(
        self,
        records: Iterable[tuple[Any, ...]],
        groups: dict[str, Group],
        txn_groups: dict[int, set[str]],
    ) -> None:
        """Rebuild groups from __consumer_offsets records (see offsets_topic.Replayed): a
        transaction's offsets wait for its marker, as in Kafka's doLoadGroupsAndOffsets."""
        for record in records:
            key_bytes, value, position = record[0], record[1], record[2]
            producer_id = record[3] if len(record) > 3 else -1
            marker = record[4] if len(record) > 4 else None
            if marker is not None:
                for group_id in txn_groups.pop(producer_id, ()):
                    group = groups.get(group_id)
                    if group is not None:
                        self.offsets.complete(group, producer_id, marker == COMMIT)
                continue
            self._replay_record(key_bytes, value, position, groups, producer_id)
            if producer_id >= 0:
                with contextlib.suppress(ValueError):
                    txn_groups.setdefault(producer_id, set()).add(decode_key(key_bytes).group)

    def _replay_record(
        self,
        key_bytes: bytes,
        value: bytes | None,
        position: int,
        groups: dict[str, Group],
        producer_id: int = -1,
    ) -> None:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                group = groups.get(key.group)
                if group is None and value is not None:
                    group = self._get_or_create(key.group, groups)
                if group is not None:
                    self.offsets.replay(group, key, value, position, producer_id)
            else:
                if value is None:
                    groups.pop(key.group, None)
                    return
                meta = decode_group_value(value)
                group = self._get_or_create(key.group, groups)
                # Members must rejoin after a restart, as with a moved Kafka coordinator.
                group.generation = meta.generation
                group.protocol_type = meta.protocol_type or None
                # A group that had members became Empty just now, by restarting.
                group.state_timestamp = (
                    self._now_ms() if meta.members else meta.current_state_timestamp
                )
        except ValueError as e:
            log.warning("skipping unreadable __consumer_offsets record: %s", e)

    # ---------------------------------------------------------------- helpers

    def _partitions_of(self, topic: str) -> int | None:
        """A topic's partition count, to validate commits: in a cluster the local catalog
        holds only this broker's partitions, so the cluster's view answers."""
        cluster = self._cluster()
        if cluster is not None:
            return cluster.partition_count(topic)
        return self._catalog_partitions(topic)

    def _catalog_partitions(self, topic: str) -> int | None:
        catalog = getattr(self.broker, "catalog", None)
        if catalog is None:
            return None
        t = catalog.get(topic)
        return None if t is None else len(t.partitions)

    def _now_ms(self) -> int:
        now = getattr(self.broker, "now_ms", None)
        return int(now()) if now is not None else int(time.time() * 1000)

    def _get_or_create(self, group_id: str, groups: dict[str, Group] | None = None) -> Group:
        if groups is None:
            groups = self.groups
        group = groups.get(group_id)
        if group is None:
            group = Group(group_id, state_timestamp=self._now_ms())
            groups[group_id] = group
        return group

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _set_state(self, group: Group, state: GroupState) -> None:
        group.state = state
        group.state_timestamp = self._now_ms()

    @staticmethod
    def _finish_futures(member: Member, error: int) -> None:
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(error, member_id=member.member_id))
        member.join_future = None
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(error))
        member.sync_future = None

    def _cancel_timers(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        for member in group.members.values():
            member.cancel_session_timer()
        for handle in group.pending_members.values():
            if handle is not None:
                handle.cancel()

    def _is_fenced(self, group: Group, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        current = group.static_members.get(instance_id)
        return current is not None and current != member_id

    # ---------------------------------------------------------------- session timers

    def _reset_session(self, group: Group, member: Member) -> None:
        member.cancel_session_timer()
        loop = asyncio.get_running_loop()
        member.session_timer = loop.call_later(
            member.session_timeout_ms / 1000, self._on_session_expired, group, member
        )

    def _on_session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        syncing = member.sync_future is not None and not member.sync_future.done()
        if member.awaiting_join or syncing:
            # A member parked in JoinGroup/SyncGroup is alive by definition.
            self._reset_session(group, member)
            return
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member_and_update(group, member, "session timeout")

    def _add_pending(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        group.pending_members[member_id] = loop.call_later(
            session_timeout_ms / 1000, self._on_pending_expired, group, member_id
        )

    def _on_pending_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, "gone") == "gone":
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # ---------------------------------------------------------------- JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        if self._closing:
            return JoinResult(int(E.not_coordinator), member_id=member_id)
        if not group_id:
            return JoinResult(int(E.invalid_group_id), member_id=member_id)
        error = self.coordinator_error(group_id)
        if error is not None:
            return JoinResult(error, member_id=member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(int(E.invalid_session_timeout), member_id=member_id)
        if rebalance_timeout_ms <= 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                protocol_type, protocols)
        if not member_id:
            if group is None:
                group = self._get_or_create(group_id)
            return await self._join_new(group, group_instance_id, require_known_member_id, *args)
        if group is None:
            return JoinResult(int(E.unknown_member_id), member_id=member_id)
        return await self._join_known(group, member_id, group_instance_id, *args)

    async def _join_new(
        self,
        group: Group,
        instance_id: str | None,
        require_known: bool,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        if group.state is GroupState.DEAD:
            return JoinResult(int(E.coordinator_not_available))
        if not group.supports(protocol_type, protocols):
            return JoinResult(int(E.inconsistent_group_protocol))
        new_id = f"{client_id}-{uuid.uuid4()}"
        args = (client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols)
        if instance_id is not None:
            return await self._join_static(group, new_id, instance_id, *args)
        if require_known:
            # KIP-394: hand out the id first, so a client that times out can rejoin with it.
            self._add_pending(group, new_id, session_ms)
            return JoinResult(int(E.member_id_required), member_id=new_id)
        return await self._add_member_and_rebalance(group, new_id, None, *args)

    async def _join_static(
        self,
        group: Group,
        new_id: str,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        args = (client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols)
        old_id = group.static_members.get(instance_id)
        old = group.members.get(old_id) if old_id is not None else None
        if old is None:
            return await self._add_member_and_rebalance(group, new_id, instance_id, *args)
        # KIP-345: a known instance came back with a fresh id; the old id is fenced.
        was_leader = group.leader_id == old.member_id
        self._finish_futures(old, int(E.fenced_instance_id))
        old.cancel_session_timer()
        del group.members[old.member_id]
        old.member_id = new_id
        old.client_id, old.client_host = client_id, client_host
        old.session_timeout_ms, old.rebalance_timeout_ms = session_ms, rebalance_ms
        group.members[new_id] = old
        group.static_members[instance_id] = new_id
        if was_leader:
            group.leader_id = new_id
        if group.state is GroupState.STABLE and old.matches(protocols):
            self._reset_session(group, old)
            # The leader learns it leads but keeps the current assignment (skip_assignment).
            return self._join_result(group, old, skip_assignment=was_leader)
        old.protocols = protocols
        return await self._wait_for_join(group, old)

    async def _join_known(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        if group.state is GroupState.DEAD:
            return JoinResult(int(E.coordinator_not_available), member_id=member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(int(E.inconsistent_group_protocol), member_id=member_id)
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            return await self._add_member_and_rebalance(
                group, member_id, instance_id, client_id, client_host, session_ms, rebalance_ms,
                protocol_type, protocols,
            )
        if self._is_fenced(group, member_id, instance_id):
            return JoinResult(int(E.fenced_instance_id), member_id=member_id)
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            return JoinResult(int(E.unknown_member_id), member_id=member_id)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        if group.state is GroupState.COMPLETING_REBALANCE and member.matches(protocols):
            # A retried JoinGroup of the generation in progress: answer it again.
            return self._join_result(group, member)
        if (
            group.state is GroupState.STABLE
            and member.matches(protocols)
            and member_id != group.leader_id
        ):
            self._reset_session(group, member)
            return self._join_result(group, member)
        member.protocols = protocols
        return await self._wait_for_join(group, member)

    async def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        member = Member(
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_ms,
            session_timeout_ms=session_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            is_new=True,
        )
        group.add(member)
        if group.in_initial_delay:
            group.new_member_added = True
        return await self._wait_for_join(group, member)

    async def _wait_for_join(self, group: Group, member: Member) -> JoinResult:
        member.cancel_session_timer()
        if member.join_future is not None and not member.join_future.done():
            # The same member joined twice (its previous request was abandoned).
            member.join_future.set_result(JoinResult(int(E.unknown_member_id)))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        if group.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._try_complete_join(group)
        return await future

    def _member_list(self, group: Group) -> list[tuple[str, str | None, bytes]]:
        protocol = group.protocol or ""
        return [
            (m.member_id, m.group_instance_id, m.metadata(protocol))
            for m in group.members.values()
        ]

    def _join_result(
        self, group: Group, member: Member, skip_assignment: bool = False
    ) -> JoinResult:
        """The current generation as `member` sees it (the leader also gets the members)."""
        is_leader = member.member_id == group.leader_id
        return JoinResult(
            NONE,
            generation=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=self._member_list(group) if is_leader else [],
            skip_assignment=skip_assignment,
        )

    # ---------------------------------------------------------------- rebalance

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(SyncResult(int(E.rebalance_in_progress)))
                m.sync_future = None
        if group.join_timer is not None:
            group.join_timer.cancel()
        loop = asyncio.get_running_loop()
        rebalance_ms = group.max_rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay = min(self.initial_delay_ms, rebalance_ms)
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = rebalance_ms - delay
            group.join_timer = loop.call_later(delay / 1000, self._on_initial_delay, group, delay)
        else:
            group.in_initial_delay = False
            group.join_timer = loop.call_later(rebalance_ms / 1000, self._complete_join, group)
        self._set_state(group, GroupState.PREPARING_REBALANCE)
        log.info("group %s: preparing rebalance (generation %d)", group.group_id, group.generation)
        if not group.in_initial_delay:
            self._try_complete_join(group)

    def _on_initial_delay(self, group: Group, delay: int) -> None:
        group.join_timer = None
        remaining = group.initial_delay_remaining_ms
        if group.new_member_added and remaining > 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            step = min(delay, remaining)
            group.new_member_added = False
            group.initial_delay_remaining_ms = remaining - step
            group.join_timer = asyncio.get_running_loop().call_later(
                step / 1000, self._on_initial_delay, group, delay
            )
            return
        group.in_initial_delay = False
        if group.all_members_joined():
            self._complete_join(group)
        else:
            group.join_timer = asyncio.get_running_loop().call_later(
                max(remaining, 0) / 1000, self._complete_join, group
            )

    def _try_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.in_initial_delay
            and group.all_members_joined()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.in_initial_delay = False
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group %s: member %s did not rejoin", group.group_id, member.member_id)
            group.remove(member.member_id)
            self._finish_futures(member, int(E.unknown_member_id))
        group.generation += 1
        if group.is_empty():
            group.protocol = None
            group.leader_id = None
            self._set_state(group, GroupState.EMPTY)
            self._spawn(self._store_group(group, group.generation))
            return
        group.protocol = group.select_protocol()
        self._set_state(group, GroupState.COMPLETING_REBALANCE)
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id, group.generation, len(group.members), group.protocol,
        )
        for member in group.members.values():
            future = member.join_future
            member.join_future = None
            member.is_new = False
            if future is not None and not future.done():
                future.set_result(self._join_result(group, member))
            self._reset_session(group, member)

    def _remove_member_and_update(self, group: Group, member: Member, reason: str) -> None:
        group.remove(member.member_id)
        self._finish_futures(member, int(E.unknown_member_id))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            log.info("group %s: rebalance after %s", group.group_id, reason)
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _group_value(self, group: Group) -> GroupValue:
        protocol = group.protocol
        return GroupValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp,
            members=tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(protocol or ""),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def _group_record(self, group: Group) -> Record:
        return encode_key(GroupKey(group.group_id)), encode_group_value(self._group_value(group))

    async def _store_group(self, group: Group, generation: int) -> None:
        if group.generation != generation or group.state is GroupState.DEAD:
            return  # moved on, deleted or unloaded meanwhile
        record = self._group_record(group)
        try:
            await self.store.write(group.group_id, [record])
        except Exception as exc:
            store_error(exc, group.group_id, "group metadata")

    # ---------------------------------------------------------------- SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        if self._closing:
            return SyncResult(int(E.not_coordinator))
        error = self.coordinator_error(group_id)
        if error == LOAD_IN_PROGRESS:
            # Kafka: the rebalance state was lost with the old coordinator, so the member
            # rejoins; older clients do not expect COORDINATOR_LOAD_IN_PROGRESS here.
            return SyncResult(int(E.rebalance_in_progress))
        if error is not None:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(int(E.unknown_member_id))
        if group.state is GroupState.DEAD:
            return SyncResult(int(E.coordinator_not_available))
        if self._is_fenced(group, member_id, instance_id):
            return SyncResult(int(E.fenced_instance_id))
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(int(E.unknown_member_id))
        if generation != group.generation:
            return SyncResult(int(E.illegal_generation))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol
        ):
            return SyncResult(int(E.inconsistent_group_protocol))
        if group.state is GroupState.EMPTY:
            return SyncResult(int(E.unknown_member_id))
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(int(E.rebalance_in_progress))
        self._reset_session(group, member)
        if group.state is GroupState.STABLE:
            return self._sync_result(group, member)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(int(E.rebalance_in_progress)))
        member.sync_future = future
        if member_id == group.leader_id:
            self._spawn(self._complete_sync(group, generation, assignments))
        return await future

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(NONE, group.protocol_type, group.protocol, member.assignment)

    async def _complete_sync(
        self, group: Group, generation: int, assignments: dict[str, bytes]
    ) -> None:
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        error = NONE
        record = self._group_record(group)
        try:
            await self.store.write(group.group_id, [record])
        except Exception as exc:
            # Kafka resets the assignment, answers every member the mapped error and
            # rebalances again.
            error = store_error(exc, group.group_id, "assignment")
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return  # the group moved on while the assignment was written
        if error != NONE:
            for m in group.members.values():
                m.assignment = b""
                self._finish_futures(m, error)
            self._prepare_rebalance(group)
            return
        self._set_state(group, GroupState.STABLE)
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(self._sync_result(group, m))
            m.sync_future = None

    # ---------------------------------------------------------------- Heartbeat / Leave

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        error = self.coordinator_error(group_id)
        if error is not None:
            # Kafka answers a heartbeat to a group being loaded blindly.
            return NONE if error == LOAD_IN_PROGRESS else error
        group = self.groups.get(group_id)
        if group is None:
            return int(E.unknown_member_id)
        if group.state is GroupState.DEAD:
            return int(E.coordinator_not_available)
        if self._is_fenced(group, member_id, instance_id):
            return int(E.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return int(E.unknown_member_id)
        if generation != group.generation:
            return int(E.illegal_generation)
        if group.state is GroupState.EMPTY:
            return int(E.unknown_member_id)
        self._reset_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return int(E.rebalance_in_progress)
        return NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return NONE, [(m, i, int(E.unknown_member_id)) for m, i in leaving]
        if group.state is GroupState.DEAD:
            return int(E.coordinator_not_available), []
        results = []
        for member_id, instance_id in leaving:
            results.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        return NONE, results

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> int:
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
            if not member_id:
                return int(E.unknown_member_id)
        elif self._is_fenced(group, member_id, instance_id):
            return int(E.fenced_instance_id)
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return int(E.unknown_member_id)
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update(group, member, "member left")
        return NONE

    # ---------------------------------------------------------------- offsets

    def _check_commit(
        self, group: Group, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """Kafka's order (ClassicGroup.validateOffsetCommit): the member and its generation
        are checked before the group state, so a commit from a past generation during
        CompletingRebalance is ILLEGAL_GENERATION, not REBALANCE_IN_PROGRESS."""
        if group.state is GroupState.DEAD:
            return int(E.coordinator_not_available)
        if generation < 0 and group.state is GroupState.EMPTY:
            return NONE  # a commit from outside group management (manual assignment)
        if self._is_fenced(group, member_id, instance_id):
            return int(E.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return int(E.unknown_member_id)
        if generation != group.generation:
            return int(E.illegal_generation)
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The member has this generation's JoinGroup answer but not yet its assignment.
            return int(E.rebalance_in_progress)
        self._reset_session(group, member)
        return NONE

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        commits: list[CommitRequest],
    ) -> list[int]:
        """One error code per commit, in order."""
        if not group_id:
            return [int(E.invalid_group_id)] * len(commits)
        error = self.coordinator_error(group_id)
        if error is not None:
            return [error] * len(commits)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return [int(E.illegal_generation)] * len(commits)
            group = self._get_or_create(group_id)
        error = self._check_commit(group, generation, member_id, instance_id)
        if error != NONE:
            return [error] * len(commits)
        return await self.offsets.commit(group, commits, self._now_ms())

    async def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        commits: list[CommitRequest],
    ) -> list[int]:
        """TxnOffsetCommit: one error code per commit, in order. The group need not exist
        (Kafka creates it Empty); a member id or generation given must match
        (ClassicGroup.validateOffsetCommit for a transactional commit)."""
        if not group_id:
            return [int(E.invalid_group_id)] * len(commits)
        error = self.coordinator_error(group_id)
        if error is not None:
            return [error] * len(commits)
        group = self.groups.get(group_id) or self._get_or_create(group_id)
        if group.state is GroupState.DEAD:
            error = int(E.coordinator_not_available)
        elif self._is_fenced(group, member_id, instance_id):
            error = int(E.fenced_instance_id)
        elif member_id and member_id not in group.members:
            error = int(E.unknown_member_id)
        elif generation >= 0 and generation != group.generation:
            error = int(E.illegal_generation)
        if error is not None:
            return [error] * len(commits)
        self._txn_groups.setdefault(producer_id, set()).add(group_id)
        return await self.offsets.txn_commit(
            group, producer_id, producer_epoch, commits, self._now_ms()
        )

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """The marker of ``producer_id``'s transaction is durable on one partition of
        __consumer_offsets: the offsets it held for that partition's groups become visible
        (commit) or are dropped (abort)."""
        group_ids = self._txn_groups.pop(producer_id, None)
        if not group_ids:
            return
        count = self._partition_count() or self._offsets_count
        others = set()
        for group_id in group_ids:
            if count and partition_for(group_id, count) != offsets_partition:
                others.add(group_id)
                continue
            group = self.groups.get(group_id)
            if group is not None:
                self.offsets.complete(group, producer_id, commit)
        if others:
            self._txn_groups[producer_id] = others

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool = False,
    ) -> tuple[int, list[FetchedOffset]]:
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, []
        return NONE, self.offsets.fetch(group_id, topics, require_stable)

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, list[int]]:
        error = self.coordinator_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return int(E.group_id_not_found), []
        subscribed: set[str] = set()
        if not group.is_empty():
            if group.protocol_type != "consumer":
                return int(E.non_empty_group), []
            subscribed = group.subscribed_topics() or set()
        return NONE, await self.offsets.delete(group, partitions, subscribed)

    def on_topic_deleted(self, topic: str) -> asyncio.Task[None] | None:
        """Forget every group's offsets of a deleted topic (tombstones are written in
        the background; offsets of topics missing at start are dropped again)."""
        return self.offsets.forget_topic(topic)

    # ---------------------------------------------------------------- retention

    def _schedule_retention(self) -> None:
        if self.retention_check_ms <= 0 or not self._running:
            return
        loop = asyncio.get_running_loop()
        self._retention_timer = loop.call_later(
            self.retention_check_ms / 1000, self._expire_offsets
        )

    def _expire_offsets(self) -> None:
        self.offsets.expire(self._now_ms())
        self._schedule_retention()

    # ---------------------------------------------------------------- admin

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[tuple[str, str, str]]:
        """(group_id, protocol_type, state) of every live group, filtered like Kafka."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "classic" not in wanted_types:
            return []
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if g.state is not GroupState.DEAD
            and (not wanted_states or g.state.value.lower() in wanted_states)
        ]

    def describe_group(self, group_id: str) -> GroupSummary:
        error = self.coordinator_error(group_id)
        if error is not None:
            return GroupSummary(group_id, error, "", "", "", [])  # Kafka's "no state"
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(group_id, NONE, GroupState.DEAD.value, "", "", [])
        stable = group.state is GroupState.STABLE
        protocol = group.protocol or ""
        return GroupSummary(
            group_id,
            NONE,
            group.state.value,
            group.protocol_type or "",
            protocol if stable else "",
            [
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ],
        )

    async def delete_groups(self, group_ids: list[str]) -> list[int]:
        errors = []
        for group_id in group_ids:
            error = self.coordinator_error(group_id)
            if error is not None:
                errors.append(error)
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                errors.append(int(E.group_id_not_found))
                continue
            if not group.is_empty() or group.state is not GroupState.EMPTY:
                errors.append(int(E.non_empty_group))
                continue
            kept = (dict(group.offsets), dict(group.offset_positions))
            records = CommittedOffsets.tombstones(group)
            self._cancel_timers(group)
            group.state = GroupState.DEAD
            del self.groups[group_id]
            try:
                await self.store.write(group_id, records)
            except Exception as exc:
                # Still there on disk, so still there in memory: an empty group again
                # (unless its partition was unloaded meanwhile).
                if group_id not in self.groups and self.coordinator_error(group_id) is None:
                    group.offsets, group.offset_positions = kept
                    group.state = GroupState.EMPTY
                    self.groups[group_id] = group
                errors.append(store_error(exc, group_id, "group deletion"))
                continue
            errors.append(NONE)
        return errors

    def __repr__(self) -> str:
        return f"GroupCoordinator({len(self.groups)} groups)"
