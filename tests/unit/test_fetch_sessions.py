"""Fetch sessions (KIP-227): the broker's cache (chronik.broker.fetch_sessions) and the
fetcher's side (chronik.cluster.fetch_session_handler), against a model of partition
logs: an incremental session answers what a full fetch would, Kafka's session errors,
its eviction rules, and chronik's partition limits."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.broker.fetch_sessions import EVICTION_MS, FetchSessionCache
from chronik.cluster.fetch_session_handler import FetchSessionHandler
from chronik.protocol import errors
from chronik.protocol.fetch_response import PartitionResult, TopicResult

TOPIC_ID = uuid.UUID(int=7)


class Part(NamedTuple):
    partition: int
    fetch_offset: int
    partition_max_bytes: int


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _topic(version: int, **fields: Any) -> SimpleNamespace:
    if version >= 13:
        return SimpleNamespace(topic_id=TOPIC_ID, **fields)
    return SimpleNamespace(topic="t", **fields)


def request(
    version: int,
    session_id: int,
    epoch: int,
    send: dict[int, int] | None = None,
    forget: tuple[int, ...] = (),
    max_bytes: int = 100,
) -> SimpleNamespace:
    """A Fetch of partitions of topic t: ``send`` maps partition to fetch offset."""
    parts = [Part(p, o, max_bytes) for p, o in (send or {}).items()]
    topics = [_topic(version, partitions=parts)] if parts else []
    forgotten = [_topic(version, partitions=list(forget))] if forget else []
    return SimpleNamespace(
        session_id=session_id, session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten
    )


class Logs:
    """A model of partition logs: records are bytes, one per offset."""

    def __init__(self, partitions: int) -> None:
        self.end = [0] * partitions
        self.hw = [0] * partitions
        self.lso = [0] * partitions
        self.start = [0] * partitions
        self.error = [0] * partitions

    def read(self, wanted: list[tuple[Any, Any]], follower: bool = False) -> list[TopicResult]:
        """A consumer reads up to the high watermark, a follower to the log end."""
        topics = []
        for key, group in wanted:
            parts = []
            for fp in group:
                i = fp.partition
                if self.error[i]:
                    parts.append(PartitionResult(i, self.error[i], -1, -1, -1, b""))
                    continue
                readable = self.end[i] if follower else self.hw[i]
                upto = min(readable, fp.fetch_offset + fp.partition_max_bytes)
                records = bytes(o % 251 for o in range(fp.fetch_offset, upto))
                parts.append(PartitionResult(i, 0, self.hw[i], self.lso[i], self.start[i], records))
            topics.append(TopicResult(str(key), TOPIC_ID, parts))
        return topics


def serve(cache: FetchSessionCache, logs: Logs, version: int, req: Any, follower: bool = False):
    """One Fetch: (error, session id, {partition: result})."""
    context = cache.new_context(version, req, follower)
    if context.error:
        code, session_id, topics = context.response([], True)
        return code, session_id, {}
    code, session_id, topics = context.response(logs.read(context.wanted, follower), True)
    return code, session_id, {p.partition: p for t in topics for p in t.partitions}


def full_session(cache, logs, version=12, partitions=(0, 1, 2), follower=False) -> int:
    code, session_id, got = serve(
        cache, logs, version, request(version, 0, 0, dict.fromkeys(partitions, 0)), follower
    )
    assert code == errors.NONE and session_id > 0 and set(got) == set(partitions)
    return session_id


# -- the rules ---------------------------------------------------------------------------


def test_full_fetch_opens_a_session_and_an_idle_incremental_one_answers_nothing() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(3)
    session_id = full_session(cache, logs)
    assert len(cache) == 1 and cache.partitions == 3
    assert serve(cache, logs, 12, request(12, session_id, 1)) == (errors.NONE, session_id, {})
    logs.end[1] = logs.hw[1] = logs.lso[1] = 5
    code, sid, got = serve(cache, logs, 12, request(12, session_id, 2))
    assert (code, sid, set(got)) == (errors.NONE, session_id, {1})
    assert got[1].records == bytes(range(5)) and got[1].high_watermark == 5
    # Not acknowledged (the fetch offset was not moved): the records come again.
    assert set(serve(cache, logs, 12, request(12, session_id, 3))[2]) == {1}
    assert serve(cache, logs, 12, request(12, session_id, 4, {1: 5}))[2] == {}
    assert cache.incremental_fetches == 4


def test_final_epoch_and_old_versions_keep_no_session() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(2)
    code, session_id, got = serve(cache, logs, 12, request(12, 0, -1, {0: 0, 1: 0}))
    assert (code, session_id, set(got)) == (errors.NONE, 0, {0, 1})
    old = SimpleNamespace(topics=[_topic(6, partitions=[Part(0, 0, 10)])])
    assert serve(cache, logs, 6, old)[1] == 0
    assert len(cache) == 0


def test_a_full_fetch_closes_the_session_it_names() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(3)
    first = full_session(cache, logs)
    code, second, _ = serve(cache, logs, 12, request(12, first, 0, {0: 0}))
    assert code == errors.NONE and second not in (0, first)
    assert cache.get(first) is None and len(cache) == 1
    code, none, _ = serve(cache, logs, 12, request(12, second, -1, {0: 0}))
    assert (code, none, len(cache)) == (errors.NONE, 0, 0)


def test_session_errors() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(3)
    session_id = full_session(cache, logs)
    assert serve(cache, logs, 12, request(12, session_id + 1, 1))[0] == (
        errors.FETCH_SESSION_ID_NOT_FOUND
    )
    assert serve(cache, logs, 12, request(12, 0, 1))[0] == errors.FETCH_SESSION_ID_NOT_FOUND
    assert serve(cache, logs, 12, request(12, session_id, 5)) == (
        errors.INVALID_FETCH_SESSION_EPOCH, 0, {}
    )
    assert serve(cache, logs, 12, request(12, session_id, -7))[0] == (
        errors.INVALID_FETCH_SESSION_EPOCH
    )
    # A session made by names is not used by ids, nor the other way round.
    assert serve(cache, logs, 13, request(13, session_id, 1))[0] == (
        errors.FETCH_SESSION_TOPIC_ID_ERROR
    )
    by_id = full_session(cache, logs, version=13)
    assert serve(cache, logs, 12, request(12, by_id, 1))[0] == errors.FETCH_SESSION_TOPIC_ID_ERROR
    # The errors changed nothing: both sessions go on at epoch 1.
    assert serve(cache, logs, 12, request(12, session_id, 1))[0] == errors.NONE
    assert serve(cache, logs, 13, request(13, by_id, 1))[0] == errors.NONE


def test_a_stale_request_of_a_session_is_refused_when_answered() -> None:
    """Two requests of the same epoch: the second is refused at once; one answered after a
    later request began (Kafka's "possible duplicate request") is refused too."""
    cache, logs = FetchSessionCache(10, 1000), Logs(3)
    session_id = full_session(cache, logs)
    first = cache.new_context(12, request(12, session_id, 1), False)
    assert cache.new_context(12, request(12, session_id, 1), False).error == (
        errors.INVALID_FETCH_SESSION_EPOCH
    )
    second = cache.new_context(12, request(12, session_id, 2), False)
    assert first.response(logs.read(first.wanted), True) == (
        errors.INVALID_FETCH_SESSION_EPOCH, session_id, []
    )
    assert first.throttled() == (errors.INVALID_FETCH_SESSION_EPOCH, session_id)
    assert second.response(logs.read(second.wanted), True)[:2] == (errors.NONE, session_id)


def test_partitions_are_added_updated_and_forgotten() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(5)
    session_id = full_session(cache, logs, partitions=(0, 1))
    code, _, got = serve(cache, logs, 12, request(12, session_id, 1, {3: 0}, forget=(0, 4)))
    assert code == errors.NONE and set(got) == {3}  # new in the session: answered once
    assert cache.partitions == 2
    assert [p.partition for p in cache.get(session_id).partitions.values()] == [1, 3]
    # Forgetting the last ones closes the session: answered without one.
    code, sid, got = serve(cache, logs, 12, request(12, session_id, 2, forget=(1, 3)))
    assert (code, sid, got, len(cache), cache.partitions) == (errors.NONE, 0, {}, 0, 0)


def test_an_error_is_answered_each_time_and_its_end_once_more() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(2)
    session_id = full_session(cache, logs, partitions=(0, 1))
    logs.error[0] = errors.NOT_LEADER_OR_FOLLOWER
    for epoch in (1, 2):
        got = serve(cache, logs, 12, request(12, session_id, epoch))[2]
        assert set(got) == {0} and got[0].error_code == errors.NOT_LEADER_OR_FOLLOWER
    logs.error[0] = errors.NONE
    got = serve(cache, logs, 12, request(12, session_id, 3))[2]
    assert set(got) == {0} and got[0].error_code == errors.NONE and got[0].high_watermark == 0
    assert serve(cache, logs, 12, request(12, session_id, 4))[2] == {}


def test_log_start_and_last_stable_offset_changes_are_answered() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(2)
    session_id = full_session(cache, logs, partitions=(0, 1))
    logs.end[0] = logs.hw[0] = 4
    serve(cache, logs, 12, request(12, session_id, 1, {0: 0}))
    serve(cache, logs, 12, request(12, session_id, 2, {0: 4}))
    logs.start[0] = 2
    assert set(serve(cache, logs, 12, request(12, session_id, 3))[2]) == {0}
    logs.lso[0] = 3
    got = serve(cache, logs, 12, request(12, session_id, 4))[2]
    assert set(got) == {0} and got[0].last_stable_offset == 3


def test_partitions_that_returned_records_move_to_the_end() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(3)
    session_id = full_session(cache, logs)
    logs.end[0] = logs.hw[0] = logs.lso[0] = 3
    serve(cache, logs, 12, request(12, session_id, 1))
    assert [p.partition for p in cache.get(session_id).partitions.values()] == [1, 2, 0]
    context = cache.new_context(12, request(12, session_id, 2), False)
    assert [[p.partition for p in group] for _, group in context.wanted] == [[1, 2, 0]]


def test_a_throttled_answer_leaves_the_session_as_it_was() -> None:
    cache, logs = FetchSessionCache(10, 1000), Logs(2)
    context = cache.new_context(12, request(12, 0, 0, {0: 0, 1: 0}), False)
    code, session_id, _ = context.response(logs.read(context.wanted), commit=False)
    assert (code, session_id, len(cache)) == (errors.NONE, 0, 0)
    assert context.throttled() == (errors.NONE, 0)
    session_id = full_session(cache, logs, partitions=(0, 1))
    logs.hw[1] = logs.end[1] = 2
    context = cache.new_context(12, request(12, session_id, 1), False)
    sized = context.response(logs.read(context.wanted), commit=False)
    assert context.throttled() == (errors.NONE, session_id)
    assert [p.partition for t in sized[2] for p in t.partitions] == [1]
    # Not remembered: the next fetch answers the change again.
    assert set(serve(cache, logs, 12, request(12, session_id, 2))[2]) == {1}


# -- the cache: slots, eviction, limits -------------------------------------------------


def test_a_full_cache_keeps_fresh_sessions_and_gives_way_to_followers() -> None:
    clock = Clock()
    cache, logs = FetchSessionCache(2, 1000, clock_ms=clock), Logs(10)
    consumer = full_session(cache, logs, partitions=(0,))
    full_session(cache, logs, partitions=(1, 2))
    # A consumer cannot push out a session created less than 120 s ago, however small.
    assert serve(cache, logs, 12, request(12, 0, 0, {3: 0, 4: 0, 5: 0}))[1] == 0
    # A follower's session is privileged: it takes a consumer's place, the smallest first.
    follower = full_session(cache, logs, partitions=(6,), follower=True)
    assert cache.get(consumer) is None and cache.get(follower) is not None
    assert cache.evictions == 1
    assert serve(cache, logs, 12, request(12, 0, 0, {7: 0, 8: 0}), follower=True)[1] != 0
    # ... but never another follower's fresh one.
    assert serve(cache, logs, 12, request(12, 0, 0, {9: 0}), follower=True)[1] == 0


def test_after_120_s_a_session_with_more_partitions_takes_a_smaller_ones_place() -> None:
    clock = Clock()
    cache, logs = FetchSessionCache(2, 1000, clock_ms=clock), Logs(10)
    small = full_session(cache, logs, partitions=(0,))
    big = full_session(cache, logs, partitions=(1, 2, 3))
    clock.now += EVICTION_MS // 2
    serve(cache, logs, 12, request(12, small, 1))
    serve(cache, logs, 12, request(12, big, 1))
    clock.now += EVICTION_MS // 2 + 1
    # Both used a minute ago: not stale, but settled. Two partitions beat one, not three.
    newer = full_session(cache, logs, partitions=(4, 5))
    assert cache.get(small) is None and cache.get(big) is not None and cache.get(newer)


def test_idle_sessions_expire() -> None:
    clock = Clock()
    cache, logs = FetchSessionCache(10, 1000, clock_ms=clock), Logs(3)
    idle = full_session(cache, logs, partitions=(0,))
    busy = full_session(cache, logs, partitions=(1,))
    clock.now += EVICTION_MS - 1
    serve(cache, logs, 12, request(12, busy, 1))
    clock.now += 2
    assert serve(cache, logs, 12, request(12, idle, 1))[0] == errors.FETCH_SESSION_ID_NOT_FOUND
    assert serve(cache, logs, 12, request(12, busy, 2))[0] == errors.NONE
    assert (len(cache), cache.partitions, cache.evictions) == (1, 1, 1)


def test_no_slots_no_sessions() -> None:
    cache, logs = FetchSessionCache(0, 1000), Logs(2)
    code, session_id, got = serve(cache, logs, 12, request(12, 0, 0, {0: 0, 1: 0}), True)
    assert (code, session_id, set(got)) == (errors.NONE, 0, {0, 1})


def test_a_session_holds_at_most_its_limit_of_partitions() -> None:
    cache, logs = FetchSessionCache(10, 4, max_total_partitions=6), Logs(10)
    # A full fetch over the limit is answered in full, without a session.
    code, session_id, got = serve(cache, logs, 12, request(12, 0, 0, dict.fromkeys(range(5), 0)))
    assert (code, session_id, len(got), len(cache)) == (errors.NONE, 0, 5, 0)
    session_id = full_session(cache, logs, partitions=(0, 1))
    # Growing past it closes the session: every partition answered, session id 0.
    code, sid, got = serve(cache, logs, 12, request(12, session_id, 1, {2: 0, 3: 0, 4: 0}))
    assert (code, sid, set(got), len(cache), cache.partitions) == (
        errors.NONE, 0, {0, 1, 2, 3, 4}, 0, 0
    )
    # All sessions together: the second one over the total is not made.
    full_session(cache, logs, partitions=(0, 1, 2, 3))
    assert serve(cache, logs, 12, request(12, 0, 0, {4: 0, 5: 0, 6: 0}))[1] == 0
    assert cache.partitions == 4


def test_a_hundred_thousand_partition_full_fetch_keeps_no_session() -> None:
    cache = FetchSessionCache(1000, 20000)
    req = request(12, 0, 0, dict.fromkeys(range(100_000), 0))
    context = cache.new_context(12, req, False)
    results = [TopicResult("t", TOPIC_ID, [
        PartitionResult(p.partition, errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, b"")
        for p in context.wanted[0][1]
    ])]
    assert context.response(results, True)[1] == 0
    assert (len(cache), cache.partitions) == (0, 0)


# -- the fetcher's side ------------------------------------------------------------------


def test_handler_sends_only_changes_and_starts_over_on_errors() -> None:
    handler: FetchSessionHandler[int, int] = FetchSessionHandler("broker 1")
    assert handler.build({0: 5, 1: 7}) == ({0: 5, 1: 7}, [])
    assert (handler.session_id, handler.epoch) == (0, 0)
    assert handler.handle_response(errors.NONE, 42)
    assert (handler.session_id, handler.epoch) == (42, 1)
    assert handler.build({0: 5, 1: 8, 2: 0}) == ({1: 8, 2: 0}, [])
    assert handler.handle_response(errors.NONE, 42) and handler.epoch == 2
    assert handler.build({1: 8}) == ({}, [0, 2])
    assert not handler.handle_response(errors.INVALID_FETCH_SESSION_EPOCH, 0)
    assert (handler.session_id, handler.epoch) == (42, 0)  # closes 42, asks for a new one
    assert handler.build({1: 8}) == ({1: 8}, [])
    assert handler.handle_response(errors.NONE, 43) and (handler.session_id, handler.epoch) == (
        43, 1
    )
    assert not handler.handle_response(errors.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert (handler.session_id, handler.epoch) == (0, 0)
    assert handler.handle_response(errors.NONE, 0)  # no session kept: full fetches
    assert (handler.session_id, handler.epoch) == (0, 0)
    handler.session_id, handler.epoch = 44, 3
    handler.handle_error()
    assert (handler.session_id, handler.epoch) == (44, 0)


# -- an incremental session answers what a full fetch would --------------------------------


class Reader:
    """A consumer of partitions of one topic: with a session (the fetcher's handler) or
    full fetches only. Remembers each partition's position and the last figures seen."""

    def __init__(
        self, cache: FetchSessionCache, version: int, sessions: bool, follower: bool
    ) -> None:
        self.cache = cache
        self.follower = follower
        self.version = version
        self.handler: FetchSessionHandler[int, int] | None = (
            FetchSessionHandler("broker") if sessions else None
        )
        self.offsets: dict[int, int] = {}
        self.seen: dict[int, tuple[int, int, int, int]] = {}
        self.received: dict[int, bytes] = {}

    def fetch(self, logs: Logs, assigned: list[int]) -> None:
        for p in assigned:
            self.offsets.setdefault(p, 0)
        wanted = {p: self.offsets[p] for p in assigned}
        for _ in range(2):  # a session error: at once again, in full
            if self.handler is None:
                req = request(self.version, 0, -1, wanted)
            else:
                send, forget = self.handler.build(wanted)
                req = request(
                    self.version, self.handler.session_id, self.handler.epoch, send, forget
                )
            code, session_id, got = serve(self.cache, logs, self.version, req, self.follower)
            if self.handler is None or self.handler.handle_response(code, session_id):
                break
        else:
            raise AssertionError("no answer after a full fetch")
        for p, result in got.items():
            assert p in wanted
            self.seen[p] = (
                result.error_code,
                result.high_watermark,
                result.last_stable_offset,
                result.log_start_offset,
            )
            if result.records:
                self.received[p] = self.received.get(p, b"") + result.records
                self.offsets[p] += len(result.records)


# One step: what happens to one partition's log, then maybe a reassignment, a broker
# restart, and a fetch by both readers.
step = st.fixed_dictionaries({
    "partition": st.integers(0, 2),
    "append": st.sampled_from([0, 0, 3, 150]),
    "commit": st.booleans(),
    "stable": st.booleans(),
    "trim": st.sampled_from([0, 0, 2]),
    "error": st.sampled_from([False, False, False, True]),
    "assign": st.one_of(
        st.none(), st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True)
    ),
    "restart": st.sampled_from([False] * 9 + [True]),
    "fetch": st.sampled_from([True, True, False]),
})


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([7, 12, 13]),
    follower=st.booleans(),
    steps=st.lists(step, max_size=30),
)
def test_an_incremental_session_answers_what_full_fetches_would(
    version: int, follower: bool, steps
) -> None:
    """Over any run of appends, high watermark and last stable offset moves, log start
    moves, errors, reassignments and broker restarts, a reader (a consumer, or a follower
    that reads past the high watermark) with a fetch session sees the same records and
    figures as one that fetches everything each time."""
    logs = Logs(4)
    cache = FetchSessionCache(10, 1000)
    incremental = Reader(cache, version, sessions=True, follower=follower)
    full = Reader(cache, version, sessions=False, follower=follower)
    assigned = [0, 1, 2]
    # At the end every partition's high watermark moves up, then its last stable offset:
    # news without records for a follower, then for a consumer.
    still = {"append": 0, "commit": False, "stable": False, "trim": 0, "error": False,
             "assign": None, "restart": False, "fetch": True}
    ending = [{**still, "partition": p, "commit": True} for p in (0, 1, 2)]
    ending += [{**still, "partition": p, "stable": True} for p in (0, 1, 2)]
    for step in [*steps, *ending]:
        p = step["partition"]
        logs.end[p] += step["append"]
        if step["commit"]:
            logs.hw[p] = logs.end[p]
        if step["stable"]:
            logs.lso[p] = logs.hw[p]
        logs.start[p] = min(logs.start[p] + step["trim"], logs.hw[p])
        if step["error"]:
            logs.error[p] = 0 if logs.error[p] else errors.NOT_LEADER_OR_FOLLOWER
        if step["assign"] is not None:
            assigned = step["assign"]
        if step["restart"]:
            # Every session is gone.
            cache = incremental.cache = full.cache = FetchSessionCache(10, 1000)
        if step["fetch"]:
            incremental.fetch(logs, assigned)
            full.fetch(logs, assigned)
            for p in assigned:
                assert incremental.offsets[p] == full.offsets[p]
                assert incremental.seen.get(p) == full.seen.get(p)
                assert incremental.received.get(p) == full.received.get(p)
    assert cache.partitions == sum(len(s.partitions) for s in cache.sessions())
