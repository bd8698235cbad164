"""Committed offsets of every group: commit, fetch, delete, expire.

Each change is an OffsetCommit record (or tombstone) of __consumer_offsets written
through the GroupStore; the in-memory map is what OffsetFetch reads. Membership checks
(generation, member id) are the coordinator's, made before it calls in here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from chronik.coordinator.group import Group, GroupState
from chronik.coordinator.offsets_codec import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_offset_value,
    encode_key,
    encode_offset_value,
)
from chronik.coordinator.offsets_topic import GroupStore, Record, store_error

log = logging.getLogger(__name__)

E = ErrorCode
NONE = int(E.none)


@dataclass(slots=True)
class CommitRequest:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: int = NONE


def _forget(group: Group, tp: tuple[str, int]) -> Record:
    group.offsets.pop(tp, None)
    group.offset_positions.pop(tp, None)
    return encode_key(OffsetKey(group.group_id, tp[0], tp[1])), None


class CommittedOffsets:
    def __init__(
        self,
        groups: dict[str, Group],
        store: GroupStore,
        topic_partitions: Callable[[str], int | None],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        max_metadata_bytes: int,
        retention_ms: int,
    ) -> None:
        self.groups = groups
        self.store = store
        self.topic_partitions = topic_partitions
        self.spawn = spawn
        self.max_metadata_bytes = max_metadata_bytes
        self.retention_ms = retention_ms

    def replay(
        self,
        group: Group,
        key: OffsetKey,
        value: bytes | None,
        position: int,
        producer_id: int = -1,
    ) -> None:
        tp = (key.topic, key.partition)
        if producer_id >= 0:
            # Held until the transaction's marker (GroupMetadataManager's pendingOffsets).
            pending = group.pending_txn_offsets.setdefault(producer_id, {})
            if value is None:
                pending.pop(tp, None)
            else:
                pending[tp] = (decode_offset_value(value), position)
            return
        if value is None:
            _forget(group, tp)
            return
        group.offsets[tp] = decode_offset_value(value)
        group.offset_positions[tp] = position

    @staticmethod
    def complete(group: Group, producer_id: int, commit: bool) -> None:
        """A transaction ended: its offsets become the group's, unless a commit written
        later in the log already replaced them (Kafka's onTxnOffsetCommitComplete)."""
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if not pending or not commit:
            return
        for tp, (value, position) in pending.items():
            if position >= 0 and group.offset_positions.get(tp, -1) < position:
                group.offsets[tp] = value
                group.offset_positions[tp] = position

    def _validate(
        self, group: Group, commits: list[CommitRequest], now: int
    ) -> tuple[list[int], list[Record], list[tuple[tuple[str, int], OffsetValue]]]:
        errors: list[int] = []
        records: list[Record] = []
        accepted: list[tuple[tuple[str, int], OffsetValue]] = []
        for c in commits:
            count = self.topic_partitions(c.topic)
            if count is None or not 0 <= c.partition < count:
                errors.append(int(E.unknown_topic_or_partition))
                continue
            metadata = c.metadata or ""
            if len(metadata.encode()) > self.max_metadata_bytes:
                errors.append(int(E.offset_metadata_too_large))
                continue
            value = OffsetValue(c.offset, c.leader_epoch, metadata, now)
            key = encode_key(OffsetKey(group.group_id, c.topic, c.partition))
            records.append((key, encode_offset_value(value)))
            accepted.append(((c.topic, c.partition), value))
            errors.append(NONE)
        return errors, records, accepted

    async def commit(self, group: Group, commits: list[CommitRequest], now: int) -> list[int]:
        """One error code per commit, in order."""
        errors, records, accepted = self._validate(group, commits, now)
        if not records:
            return errors
        try:
            last = await self.store.write(group.group_id, records)
        except Exception as exc:
            code = store_error(exc, group.group_id, "offsets", commit=True)
            return [code if e == NONE else e for e in errors]
        first = last - len(records) + 1
        for i, (tp, value) in enumerate(accepted):
            position = first + i
            # Concurrent commits may finish their fsyncs out of order; the log decides.
            if group.offset_positions.get(tp, -1) < position:
                group.offsets[tp] = value
                group.offset_positions[tp] = position
        return errors

    async def txn_commit(
        self,
        group: Group,
        producer_id: int,
        producer_epoch: int,
        commits: list[CommitRequest],
        now: int,
    ) -> list[int]:
        """TxnOffsetCommit: the offsets are written as part of the producer's transaction
        and stay pending until its marker completes it (complete)."""
        errors, records, accepted = self._validate(group, commits, now)
        if not records:
            return errors
        pending = group.pending_txn_offsets.setdefault(producer_id, {})
        # In flight (position -1) before the write, so an abort marker that lands while
        # the write waits for its fsync still finds and drops them.
        placed = {tp: (value, -1) for tp, value in accepted}
        previous = {tp: pending[tp] for tp in placed if tp in pending}
        pending.update(placed)
        try:
            last = await self.store.write(group.group_id, records, producer_id, producer_epoch)
        except Exception as exc:
            current = group.pending_txn_offsets.get(producer_id)
            if current is not None:
                for tp, entry in placed.items():
                    if current.get(tp) is entry:
                        if tp in previous:
                            current[tp] = previous[tp]
                        else:
                            del current[tp]
                if not current:
                    del group.pending_txn_offsets[producer_id]
            code = store_error(exc, group.group_id, "transactional offsets", commit=True)
            return [code if e == NONE else e for e in errors]
        first = last - len(records) + 1
        current = group.pending_txn_offsets.get(producer_id)
        for i, (tp, entry) in enumerate(placed.items()):
            if current is not None and current.get(tp) is entry:
                current[tp] = (entry[0], first + i)
        return errors

    def fetch(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool = False,
    ) -> list[FetchedOffset]:
        """With ``require_stable`` (OffsetFetch v7+) a partition whose offset waits on an
        open transaction answers UNSTABLE_OFFSET_COMMIT, and the client retries."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        unstable = group is not None and require_stable and bool(group.pending_txn_offsets)

        def fetched(topic: str, p: int) -> FetchedOffset:
            if unstable and group is not None and group.has_pending_offset((topic, p)):
                return FetchedOffset(topic, p, -1, -1, "", int(E.unstable_offset_commit))
            v = offsets.get((topic, p))
            if v is None:
                return FetchedOffset(topic, p, -1, -1, "")
            return FetchedOffset(topic, p, v.offset, v.leader_epoch, v.metadata)

        if topics is None:
            return [fetched(t, p) for t, p in sorted(offsets)]
        return [fetched(topic, p) for topic, partitions in topics for p in partitions]

    async def delete(
        self, group: Group, partitions: list[tuple[str, int]], subscribed: set[str]
    ) -> list[int]:
        errors = []
        records: list[Record] = []
        kept = (dict(group.offsets), dict(group.offset_positions))
        for topic, p in partitions:
            if topic in subscribed:
                errors.append(int(E.group_subscribed_to_topic))
            elif self.topic_partitions(topic) is None:
                errors.append(int(E.unknown_topic_or_partition))
            else:
                errors.append(NONE)
                if (topic, p) in group.offsets:
                    records.append(_forget(group, (topic, p)))
        if records:
            try:
                await self.store.write(group.group_id, records)
            except Exception as exc:
                # Not deleted on disk, so not in memory either.
                for tp in kept[0]:
                    if tp not in group.offsets:
                        group.offsets[tp] = kept[0][tp]
                        group.offset_positions[tp] = kept[1].get(tp, -1)
                code = store_error(exc, group.group_id, "offset deletion")
                return [code if e == NONE else e for e in errors]
        return errors

    @staticmethod
    def tombstones(group: Group) -> list[Record]:
        """Records that delete the group and all its offsets."""
        records = [_forget(group, tp) for tp in list(group.offsets)]
        records.append((encode_key(GroupKey(group.group_id)), None))
        return records

    def forget_topic(self, topic: str) -> asyncio.Task[None] | None:
        """Forget every group's offsets of a deleted topic, and tombstone them."""
        writes: dict[str, list[Record]] = {}
        for group in self.groups.values():
            for tp in [tp for tp in group.offsets if tp[0] == topic]:
                writes.setdefault(group.group_id, []).append(_forget(group, tp))
        return self.spawn(self._write_all(writes)) if writes else None

    def expire(self, now: int) -> None:
        """Kafka's offsets.retention.minutes: offsets of an Empty group expire once it has
        been empty that long; offsets of a group never managed by us, by commit time."""
        writes: dict[str, list[Record]] = {}
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY:
                continue
            for tp, v in list(group.offsets.items()):
                since = group.state_timestamp if group.protocol_type else v.commit_timestamp
                if since >= 0 and since + self.retention_ms < now:
                    writes.setdefault(group.group_id, []).append(_forget(group, tp))
            if not group.offsets and group.group_id in writes:
                writes[group.group_id].append((encode_key(GroupKey(group.group_id)), None))
                group.state = GroupState.DEAD
                del self.groups[group.group_id]
        if writes:
            self.spawn(self._write_all(writes))

    async def _write_all(self, writes: dict[str, list[Record]]) -> None:
        for group_id, records in writes.items():
            try:
                await self.store.write(group_id, records)
            except Exception as exc:
                store_error(exc, group_id, "tombstones")
