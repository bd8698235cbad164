"""Fetch sessions (KIP-227), kept as Kafka's FetchSessionCache and FetchManager keep them.

A client with many partitions asks once for all of them (a full fetch, session_epoch 0);
the broker remembers them in a session and answers its id. Each following request
(same id, epoch 1, 2, ...) names only the partitions whose fetch position or limits
changed, and those to forget (forgotten_topics_data: by name v7-12, by topic id v13+);
its answer carries only the partitions with something new: records, a changed high
watermark, last stable offset or log start offset, or an error. Session state lives in
memory only: a restarted broker answers FETCH_SESSION_ID_NOT_FOUND and the client
starts over with a full fetch.

The rules, as Kafka's FetchManager.newContext applies them:

- session_epoch 0 or -1 (FINAL) is a full fetch; a session id it carries is closed first.
  Epoch 0 asks for a new session (the answer's session id, or 0 when none could be
  made), -1 for none. Requests below v7 have no session fields and are sessionless.
- Any other epoch is incremental: an unknown id answers FETCH_SESSION_ID_NOT_FOUND, an
  epoch other than the session's next INVALID_FETCH_SESSION_EPOCH, a version on the
  other side of v13 than the one that made the session FETCH_SESSION_TOPIC_ID_ERROR;
  each with no partitions and session id 0. Forgetting a partition the session does
  not hold is no error. A session left with no partitions is closed (session id 0).
- Partitions that returned records move to the end of the session, so that under
  max_bytes the others are read first next time.

Limits. ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's, default 1000;
0: no sessions). When the cache is full a new session may take the place of one idle
for EVICTION_MS (Kafka's 120 s), else of the least valuable one created over EVICTION_MS
ago that has fewer partitions: consumers' sessions go before followers' (followers'
sessions are privileged, and may also replace any consumer's). chronik's additions, for
memory: a session holds at most ``max.broker.partitions`` partitions and all sessions
together TOTAL_FACTOR times that; a full fetch over them is answered without a session,
an incremental one that grows its session past them closes it (answered in full,
session id 0). A session unused for EVICTION_MS is dropped even when the cache has room.

Cost: a fetch touches only the partitions of its request or session; the cache's scan
for a session to evict runs only when it is full.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from chronik.protocol import errors
from chronik.protocol.compat import ZERO_UUID
from chronik.protocol.fetch_metadata import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    is_full,
    next_epoch,
)
from chronik.protocol.fetch_response import PartitionResult, TopicResult

# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
EVICTION_MS = 120_000
# All sessions together hold at most this many times max.broker.partitions partitions.
TOTAL_FACTOR = 10

TopicKey = str | UUID
# What one Fetch reads: per topic (name, or id from v13) its partitions, each an object
# with the request's partition fields (a kio FetchPartition or a CachedPartition).
Wanted = list[tuple[TopicKey, Sequence[Any]]]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class CachedPartition:
    """A partition of a session: what its fetcher last asked, and what it was last
    answered (to leave it out while nothing changes)."""

    __slots__ = (
        "topic",
        "partition",
        "fetch_offset",
        "current_leader_epoch",
        "last_fetched_epoch",
        "log_start_offset",
        "partition_max_bytes",
        "high_watermark",
        "last_stable_offset",
        "local_start_offset",
    )

    def __init__(self, topic: TopicKey, fp: Any) -> None:
        self.topic = topic
        self.partition = int(fp.partition)
        self.ask(fp)
        # -1: nothing answered yet, so the first answer includes the partition.
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.local_start_offset = -1

    def ask(self, fp: Any) -> None:
        self.fetch_offset = int(fp.fetch_offset)
        self.current_leader_epoch = int(getattr(fp, "current_leader_epoch", -1))
        self.last_fetched_epoch = int(getattr(fp, "last_fetched_epoch", -1))
        self.log_start_offset = int(getattr(fp, "log_start_offset", -1))
        self.partition_max_bytes = int(fp.partition_max_bytes)

    def changed(self, result: PartitionResult, update: bool) -> bool:
        """Whether ``result`` must be in an incremental answer (Kafka's
        CachedPartition.maybeUpdateResponseData); with ``update`` it is remembered."""
        must = bool(result.records) or result.error_code != errors.NONE
        if result.high_watermark != self.high_watermark:
            must = True
            if update:
                self.high_watermark = result.high_watermark
        if result.last_stable_offset != self.last_stable_offset:
            must = True
            if update:
                self.last_stable_offset = result.last_stable_offset
        if result.log_start_offset != self.local_start_offset:
            must = True
            if update:
                self.local_start_offset = result.log_start_offset
        if result.error_code != errors.NONE and update:
            # Sent again once the error is gone, whatever the offsets are then.
            self.high_watermark = -1
        return must


class FetchSession:
    __slots__ = ("id", "privileged", "uses_ids", "created_ms", "last_used_ms", "epoch",
                 "partitions")

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        uses_ids: bool,
        now: int,
        partitions: dict[tuple[TopicKey, int], CachedPartition],
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_ids = uses_ids
        self.created_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions = partitions

    def update(self, request: Any) -> None:
        """Add or update the request's partitions, then drop the forgotten ones."""
        parts = self.partitions
        for key, group in _request_wanted(self.uses_ids, request):
            for fp in group:
                cached = parts.get((key, fp.partition))
                if cached is None:
                    parts[(key, int(fp.partition))] = CachedPartition(key, fp)
                else:
                    cached.ask(fp)
        for forgotten in getattr(request, "forgotten_topics_data", ()) or ():
            key = _topic_key(self.uses_ids, forgotten)
            for index in forgotten.partitions:
                parts.pop((key, index), None)

    def wanted(self) -> Wanted:
        """The session's partitions in its order, consecutive ones of a topic together
        (a topic may come more than once, as in Kafka's answers)."""
        groups: Wanted = []
        last: TopicKey | None = None
        run: list[CachedPartition] = []
        for cached in self.partitions.values():
            if cached.topic != last or not run:
                run = []
                groups.append((cached.topic, run))
                last = cached.topic
            run.append(cached)
        return groups


def _topic_key(uses_ids: bool, topic: Any) -> TopicKey:
    # kio reads the all-zero id as None; it names no topic and is answered as such.
    return (topic.topic_id or ZERO_UUID) if uses_ids else topic.topic


def _request_wanted(uses_ids: bool, request: Any) -> Wanted:
    return [(_topic_key(uses_ids, t), t.partitions) for t in request.topics]


class FetchContext:
    """How one Fetch is read and answered: ``wanted`` is what to read, ``response``
    turns the read into the answer (top-level error, session id, topics); with
    ``commit`` false it only sizes it (for the quota), changing nothing."""

    error = errors.NONE

    def __init__(self, wanted: Wanted) -> None:
        self.wanted = wanted

    def response(
        self, topics: list[TopicResult], commit: bool
    ) -> tuple[int, int, list[TopicResult]]:
        return errors.NONE, INVALID_SESSION_ID, topics

    def throttled(self) -> tuple[int, int]:
        """Error and session id of the empty answer to a fetch over its quota."""
        return errors.NONE, INVALID_SESSION_ID


class SessionError(FetchContext):
    def __init__(self, error: int) -> None:
        super().__init__([])
        self.error = error

    def response(
        self, topics: list[TopicResult], commit: bool
    ) -> tuple[int, int, list[TopicResult]]:
        return self.error, INVALID_SESSION_ID, []

    def throttled(self) -> tuple[int, int]:
        return self.error, INVALID_SESSION_ID


class FullFetch(FetchContext):
    """A full fetch that asks for a session: made when the answer is sent."""

    def __init__(
        self, cache: FetchSessionCache, wanted: Wanted, privileged: bool, uses_ids: bool
    ) -> None:
        super().__init__(wanted)
        self.cache = cache
        self.privileged = privileged
        self.uses_ids = uses_ids

    def response(
        self, topics: list[TopicResult], commit: bool
    ) -> tuple[int, int, list[TopicResult]]:
        session_id = INVALID_SESSION_ID
        if commit:
            session_id = self.cache.create(self.privileged, self.uses_ids, self.wanted, topics)
        return errors.NONE, session_id, topics


class IncrementalFetch(FetchContext):
    def __init__(self, session: FetchSession) -> None:
        super().__init__(session.wanted())
        self.session = session
        self.epoch = session.epoch

    def response(
        self, topics: list[TopicResult], commit: bool
    ) -> tuple[int, int, list[TopicResult]]:
        session = self.session
        if session.epoch != self.epoch:
            # Another request of this session came meanwhile (Kafka: "possible
            # duplicate request"): this one's view of the session is stale.
            return errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        kept_topics: list[TopicResult] = []
        fed: list[CachedPartition] = []
        for (_, group), topic in zip(self.wanted, topics, strict=True):
            kept = []
            for cached, result in zip(group, topic.partitions, strict=True):
                if cached.changed(result, commit):
                    kept.append(result)
                    if commit and result.records:
                        fed.append(cached)
            if kept:
                kept_topics.append(topic._replace(partitions=kept))
        parts = session.partitions
        for cached in fed:
            key = (cached.topic, cached.partition)
            if parts.get(key) is cached:
                del parts[key]
                parts[key] = cached
        return errors.NONE, session.id, kept_topics

    def throttled(self) -> tuple[int, int]:
        if self.session.epoch != self.epoch:
            return errors.INVALID_FETCH_SESSION_EPOCH, self.session.id
        return errors.NONE, self.session.id


class FetchSessionCache:
    """The broker's fetch sessions, least recently used first."""

    def __init__(
        self,
        slots: int,
        max_session_partitions: int,
        max_total_partitions: int | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.slots = slots
        self.max_session_partitions = max_session_partitions
        self.max_total_partitions = (
            max_session_partitions * TOTAL_FACTOR
            if max_total_partitions is None
            else max_total_partitions
        )
        self._clock = clock_ms
        self._sessions: dict[int, FetchSession] = {}
        # Figures for the metrics (Kafka's NumIncrementalFetchSessions,
        # NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictionsPerSec).
        self.partitions = 0
        self.evictions = 0
        self.incremental_fetches = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        return list(self._sessions.values())

    def new_context(self, version: int, request: Any, follower: bool) -> FetchContext:
        uses_ids = version >= 13
        if version < 7:
            return FetchContext(_request_wanted(uses_ids, request))
        session_id = int(request.session_id)
        epoch = int(request.session_epoch)
        now = self._clock()
        self._expire(now)
        if is_full(epoch):
            if session_id != INVALID_SESSION_ID:
                closed = self._sessions.get(session_id)
                if closed is not None:
                    self._remove(closed)
            wanted = _request_wanted(uses_ids, request)
            if epoch == FINAL_EPOCH or self.slots <= 0:
                return FetchContext(wanted)
            return FullFetch(self, wanted, follower, uses_ids)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionError(errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionError(errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_ids != uses_ids:
            return SessionError(errors.FETCH_SESSION_TOPIC_ID_ERROR)
        before = len(session.partitions)
        session.update(request)
        self.partitions += len(session.partitions) - before
        if not session.partitions:
            self._remove(session)
            return FetchContext(_request_wanted(uses_ids, request))
        if (
            len(session.partitions) > self.max_session_partitions
            or self.partitions > self.max_total_partitions
        ):
            # Answered in full, and without a session: its next full fetch gets one if
            # there is room then.
            self._remove(session)
            return FetchContext(session.wanted())
        self._touch(session, now)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return IncrementalFetch(session)

    def create(
        self, privileged: bool, uses_ids: bool, wanted: Wanted, topics: list[TopicResult]
    ) -> int:
        """A session of a full fetch's partitions, as answered; its id, or 0 when the
        cache has no room for it."""
        size = sum(len(group) for _, group in wanted)
        now = self._clock()
        if size > self.max_session_partitions or not self._make_room(privileged, size, now):
            return INVALID_SESSION_ID
        parts: dict[tuple[TopicKey, int], CachedPartition] = {}
        for (key, group), topic in zip(wanted, topics, strict=True):
            for fp, result in zip(group, topic.partitions, strict=True):
                cached = CachedPartition(key, fp)
                cached.changed(result, True)
                parts[(key, cached.partition)] = cached
        session_id = secrets.randbelow(MAX_EPOCH) + 1
        while session_id in self._sessions:
            session_id = secrets.randbelow(MAX_EPOCH) + 1
        self._sessions[session_id] = FetchSession(session_id, privileged, uses_ids, now, parts)
        self.partitions += len(parts)
        return session_id

    # -- upkeep ---------------------------------------------------------------------------

    def _touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        # Reinserted: the dict's order is the order of last use.
        del self._sessions[session.id]
        self._sessions[session.id] = session

    def _remove(self, session: FetchSession) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self.partitions -= len(session.partitions)

    def _expire(self, now: int) -> None:
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if now - oldest.last_used_ms <= EVICTION_MS:
                return
            self._remove(oldest)
            self.evictions += 1

    def _make_room(self, privileged: bool, size: int, now: int) -> bool:
        while (
            len(self._sessions) >= self.slots
            or self.partitions + size > self.max_total_partitions
        ):
            if not self._evict_one(privileged, size, now):
                return False
        return True

    def _evict_one(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's FetchSessionCache.tryEvict: the least recently used session if it is
        stale, else the least valuable evictable one if the new session is worth more
        (privileged first, then more partitions)."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms > EVICTION_MS:
            self._remove(oldest)
            self.evictions += 1
            return True
        victim: FetchSession | None = None
        victim_key: tuple[bool, int, int] | None = None
        for session in self._sessions.values():
            settled = now - session.created_ms > EVICTION_MS
            if not (settled or privileged and not session.privileged):
                continue
            key = (session.privileged, len(session.partitions), session.id)
            if victim_key is None or key < victim_key:
                victim, victim_key = session, key
        if victim is None or victim_key is None or (privileged, size, 0) < victim_key:
            return False
        self._remove(victim)
        self.evictions += 1
        return True
