"""The group state machine, driven directly with an in-memory store."""

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronik.coordinator.committed_offsets import CommitRequest
from chronik.coordinator.group import GroupState
from chronik.coordinator.group_coordinator import GroupCoordinator
from chronik.coordinator.offsets_codec import OffsetValue

NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNKNOWN_TOPIC_OR_PARTITION = 3


class MemoryStore:
    def __init__(self):
        self.records = []

    async def replay(self):
        return [(k, v, i) for i, (k, v) in enumerate(self.records)]

    async def write(self, group_id, records):
        await asyncio.sleep(0)
        self.records.extend(records)
        return len(self.records) - 1


class FakeBroker:
    def __init__(self, **config):
        self.config = {
            "group.min.session.timeout.ms": "10",
            "group.initial.rebalance.delay.ms": "0",
            **config,
        }


TOPICS = {"t": 6, "u": 2}


def coordinator(store=None, **config):
    return GroupCoordinator(FakeBroker(**config), store or MemoryStore(), TOPICS.get)


def subscription(*topics):
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def join(c, group="g", member="", instance=None, protocols=None, session=5000,
               rebalance=5000, require_known=False):
    return await c.join_group(
        group, member, instance, "client", "/127.0.0.1", session, rebalance, "consumer",
        protocols or [("range", subscription("t"))], require_known,
    )


async def join_all(c, n, group="g", **kw):
    return await asyncio.gather(*(join(c, group, **kw) for _ in range(n)))


def test_member_id_required_round_trip_and_first_generation():
    async def go():
        c = coordinator()
        first = await join(c, require_known=True)
        assert first.error == MEMBER_ID_REQUIRED
        assert first.member_id.startswith("client-")
        r = await join(c, member=first.member_id, require_known=True)
        assert r.error == NONE
        assert r.generation == 1
        assert r.leader == r.member_id == first.member_id
        assert r.protocol_name == "range"
        assert [m[0] for m in r.members] == [r.member_id]
        s = await c.sync_group("g", 1, r.member_id, None, "consumer", "range",
                               {r.member_id: b"assignment"})
        assert (s.error, s.assignment) == (NONE, b"assignment")
        assert c.groups["g"].state is GroupState.STABLE

    run(go())


def test_three_members_one_generation_leader_sees_all():
    async def go():
        c = coordinator(**{"group.initial.rebalance.delay.ms": "50"})
        results = await join_all(c, 3)
        assert {r.error for r in results} == {NONE}
        assert {r.generation for r in results} == {1}
        leaders = [r for r in results if r.member_id == r.leader]
        assert len(leaders) == 1
        assert sorted(m[0] for m in leaders[0].members) == sorted(r.member_id for r in results)
        assert all(r.members == [] for r in results if r is not leaders[0])
        plan = {r.member_id: r.member_id.encode() for r in results}
        syncs = await asyncio.gather(*(
            c.sync_group("g", 1, r.member_id, None, None, None,
                         plan if r is leaders[0] else {})
            for r in results
        ))
        assert [s.assignment for s in syncs] == [r.member_id.encode() for r in results]

    run(go())


def test_errors_for_wrong_generation_unknown_member_and_rebalance():
    async def go():
        c = coordinator()
        a = await join(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"x"})
        assert c.heartbeat("g", 1, a.member_id, None) == NONE
        assert c.heartbeat("g", 0, a.member_id, None) == ILLEGAL_GENERATION
        assert c.heartbeat("g", 1, "nobody", None) == UNKNOWN_MEMBER_ID
        assert c.heartbeat("nogroup", 1, a.member_id, None) == UNKNOWN_MEMBER_ID
        b_join = asyncio.ensure_future(join(c))
        await asyncio.sleep(0.01)
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", 1, a.member_id, None) == REBALANCE_IN_PROGRESS
        s = await c.sync_group("g", 1, a.member_id, None, None, None, {})
        assert s.error == REBALANCE_IN_PROGRESS
        a2, b = await asyncio.gather(join(c, member=a.member_id), b_join)
        assert a2.generation == b.generation == 2
        assert (await c.sync_group("g", 1, b.member_id, None, None, None, {})).error == (
            ILLEGAL_GENERATION
        )

    run(go())


def test_invalid_session_timeout_and_inconsistent_protocol():
    async def go():
        c = coordinator(**{"group.max.session.timeout.ms": "10000"})
        assert (await join(c, session=5)).error == INVALID_SESSION_TIMEOUT
        assert (await join(c, session=20000)).error == INVALID_SESSION_TIMEOUT
        await join(c)
        r = await c.join_group("g", "", None, "c", "h", 5000, 5000, "consumer",
                               [("other", b"")], False)
        assert r.error == INCONSISTENT_GROUP_PROTOCOL
        r = await c.join_group("g", "", None, "c", "h", 5000, 5000, "connect",
                               [("range", b"")], False)
        assert r.error == INCONSISTENT_GROUP_PROTOCOL

    run(go())


def test_protocol_chosen_by_votes_among_common_protocols():
    async def go():
        c = coordinator(**{"group.initial.rebalance.delay.ms": "50"})
        sub = subscription("t")
        results = await asyncio.gather(
            join(c, protocols=[("roundrobin", sub), ("range", sub)]),
            join(c, protocols=[("range", sub), ("roundrobin", sub)]),
            join(c, protocols=[("sticky", sub), ("range", sub), ("roundrobin", sub)]),
        )
        assert {r.protocol_name for r in results} == {"range"}

    run(go())


def test_leave_triggers_rebalance_and_survivors_own_the_group():
    async def go():
        c = coordinator()
        a = await join(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        b_task = asyncio.ensure_future(join(c))
        await asyncio.sleep(0.01)
        a2 = await join(c, member=a.member_id)
        b = await b_task
        assert a2.generation == 2
        top, results = c.leave_group("g", [(b.member_id, None), ("ghost", None)])
        assert top == NONE
        assert [e for _, _, e in results] == [NONE, UNKNOWN_MEMBER_ID]
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        a3 = await join(c, member=a.member_id)
        assert (a3.generation, a3.leader, len(a3.members)) == (3, a.member_id, 1)

    run(go())


def test_session_expiry_removes_a_silent_member():
    async def go():
        c = coordinator()
        a = await join(c, session=200)
        b_task = asyncio.ensure_future(join(c, session=200))
        await asyncio.sleep(0.01)
        await join(c, member=a.member_id, session=200)
        b = await b_task
        await asyncio.gather(
            c.sync_group("g", 2, a.member_id, None, None, None, {}),
            c.sync_group("g", 2, b.member_id, None, None, None, {}),
        )
        # Only a keeps heartbeating; b goes silent.
        for _ in range(6):
            await asyncio.sleep(0.06)
            c.heartbeat("g", c.groups["g"].generation, a.member_id, None)
        assert b.member_id not in c.groups["g"].members
        assert c.heartbeat("g", 2, a.member_id, None) == REBALANCE_IN_PROGRESS
        a2 = await join(c, member=a.member_id, session=200)
        assert a2.generation == 3 and len(a2.members) == 1

    run(go())


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    async def go():
        c = coordinator()
        a = await join(c, session=5000, rebalance=150)
        b_task = asyncio.ensure_future(join(c, session=5000, rebalance=150))
        await asyncio.sleep(0.01)
        # a never rejoins; after the rebalance timeout b forms the group alone.
        b = await b_task
        assert b.generation == 2
        assert list(c.groups["g"].members) == [b.member_id]
        assert c.heartbeat("g", 2, a.member_id, None) == UNKNOWN_MEMBER_ID

    run(go())


def test_static_member_rejoin_fences_old_id_without_rebalance():
    async def go():
        c = coordinator()
        a = await join(c, instance="i-1")
        await c.sync_group("g", 1, a.member_id, "i-1", None, None, {a.member_id: b"p0"})
        again = await join(c, instance="i-1")
        assert again.error == NONE
        assert again.member_id != a.member_id
        assert again.generation == 1  # no rebalance for a known static member
        assert again.skip_assignment
        assert c.heartbeat("g", 1, a.member_id, "i-1") == FENCED_INSTANCE_ID
        s = await c.sync_group("g", 1, again.member_id, "i-1", None, None, {})
        assert (s.error, s.assignment) == (NONE, b"p0")
        _, results = c.leave_group("g", [("", "i-1")])
        assert results[0][2] == NONE
        assert c.groups["g"].members == {}

    run(go())


def test_commit_fetch_and_replay_restores_offsets_with_empty_group():
    async def go():
        store = MemoryStore()
        c = coordinator(store)
        a = await join(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        errors = await c.commit_offsets("g", 1, a.member_id, None, [
            CommitRequest("t", 0, 10, 3, "meta"),
            CommitRequest("t", 9, 1, -1, None),
            CommitRequest("missing", 0, 1, -1, None),
        ])
        assert errors == [NONE, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]
        assert (await c.commit_offsets("g", 0, a.member_id, None, [
            CommitRequest("t", 1, 1, -1, None)]))[0] == ILLEGAL_GENERATION
        # A manual-assignment commit (generation -1) into a new group.
        assert await c.commit_offsets("solo", -1, "", None, [
            CommitRequest("u", 1, 7, -1, "")]) == [NONE]
        _, fetched = c.fetch_offsets("g", [("t", [0, 1])])
        assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [
            (10, 3, "meta"), (-1, -1, ""),
        ]

        restarted = coordinator(store)
        await restarted.start()
        await restarted.stop()
        group = restarted.groups["g"]
        assert group.state is GroupState.EMPTY
        assert group.generation == 1
        _, fetched = restarted.fetch_offsets("g", None)
        assert [(f.topic, f.partition, f.offset, f.metadata) for f in fetched] == [
            ("t", 0, 10, "meta"),
        ]
        assert restarted.fetch_offsets("solo", None)[1][0].offset == 7
        await c.stop()

    run(go())


def test_delete_groups_and_offsets():
    async def go():
        store = MemoryStore()
        c = coordinator(store)
        a = await join(c, protocols=[("range", subscription("t"))])
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        await c.commit_offsets("g", 1, a.member_id, None, [
            CommitRequest("t", 0, 5, -1, None), CommitRequest("u", 0, 6, -1, None)])
        assert await c.delete_groups(["g", "nope"]) == [NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]
        top, errs = await c.delete_offsets("g", [("t", 0), ("u", 0)])
        assert (top, errs) == (NONE, [GROUP_SUBSCRIBED_TO_TOPIC, NONE])
        assert [f.topic for f in c.fetch_offsets("g", None)[1]] == ["t"]
        c.leave_group("g", [(a.member_id, None)])
        await asyncio.sleep(0.01)
        assert c.groups["g"].state is GroupState.EMPTY
        assert await c.delete_groups(["g"]) == [NONE]
        assert c.list_groups() == []
        restarted = coordinator(store)
        await restarted.start()
        assert "g" not in restarted.groups
        await restarted.stop()
        await c.stop()

    run(go())


def test_topic_deletion_removes_offsets_durably():
    async def go():
        store = MemoryStore()
        c = coordinator(store)
        await c.commit_offsets("g", -1, "", None, [
            CommitRequest("t", 0, 5, -1, None), CommitRequest("u", 1, 6, -1, None)])
        task = c.on_topic_deleted("t")
        await task
        assert [f.topic for f in c.fetch_offsets("g", None)[1]] == ["u"]
        restarted = coordinator(store)
        await restarted.start()
        assert [f.topic for f in restarted.fetch_offsets("g", None)[1]] == ["u"]
        await restarted.stop()

    run(go())


def test_list_and_describe():
    async def go():
        c = coordinator()
        a = await join(c)
        assert c.list_groups() == [("g", "consumer", "CompletingRebalance")]
        await c.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"asg"})
        assert c.list_groups(states=["stable"]) == [("g", "consumer", "Stable")]
        assert c.list_groups(states=["empty"]) == []
        d = c.describe_group("g")
        assert (d.state, d.protocol, d.members[0].assignment) == ("Stable", "range", b"asg")
        assert c.describe_group("missing").state == "Dead"
        await c.stop()

    run(go())


@pytest.mark.parametrize("delay_ms", [0, 80])
def test_initial_delay_gathers_late_joiners_into_one_generation(delay_ms):
    async def go():
        c = coordinator(**{"group.initial.rebalance.delay.ms": str(delay_ms)})
        first = asyncio.ensure_future(join(c, rebalance=200))
        await asyncio.sleep(0.02)
        second = await join(c, rebalance=200)
        r1 = await first
        return r1.generation, second.generation

    gens = run(go())
    if delay_ms:
        assert gens == (1, 1)
    else:
        assert gens[1] == 2  # without the delay the late joiner forces a second generation


def test_release_waiters_answers_held_joins_with_not_coordinator():
    async def go():
        c = coordinator()
        a = await join(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        held = asyncio.ensure_future(join(c))  # waits for a, which never rejoins
        await asyncio.sleep(0.02)
        assert not held.done()
        c.release_waiters()
        assert (await held).error == 16  # NOT_COORDINATOR
        assert (await join(c)).error == 16
        await c.stop()

    run(go())


def test_offsets_of_an_empty_group_expire_after_retention():
    async def go():
        store = MemoryStore()
        c = coordinator(store, **{"offsets.retention.minutes": "1"})
        await c.commit_offsets("old", -1, "", None, [CommitRequest("t", 0, 5, -1, None)])
        await c.commit_offsets("new", -1, "", None, [CommitRequest("t", 0, 6, -1, None)])
        commit_ts = c.groups["old"].offsets[("t", 0)].commit_timestamp
        c.groups["new"].offsets[("t", 0)] = OffsetValue(6, -1, "", commit_ts + 120_000)
        c.offsets.expire(commit_ts + 61_000)
        await asyncio.sleep(0.01)
        assert "old" not in c.groups
        assert c.fetch_offsets("new", None)[1][0].offset == 6
        restarted = coordinator(store)
        await restarted.start()
        assert "old" not in restarted.groups
        await restarted.stop()
        await c.stop()

    run(go())


def test_pending_member_that_never_joins_does_not_hold_up_the_rebalance():
    async def go():
        c = coordinator()
        a = await join(c)
        await c.sync_group("g", 1, a.member_id, None, None, None, {})
        pending = await join(c, session=100, require_known=True)
        assert pending.error == MEMBER_ID_REQUIRED
        # a rejoins as leader; the group waits for the pending id only until it expires.
        again = await join(c, member=a.member_id)
        assert (again.error, again.generation) == (NONE, 2)
        late = await join(c, member=pending.member_id, session=100, require_known=True)
        assert late.error == UNKNOWN_MEMBER_ID
        await c.stop()

    run(go())


# Property: whatever the arrival order and whoever leaves, well-behaved members that keep
# rejoining on errors end in one Stable generation where each holds the leader's assignment.
class Client:
    def __init__(self, c, join_delay: float, leave_after: float | None) -> None:
        self.c = c
        self.join_delay = join_delay
        self.leave_after = leave_after
        self.member_id = ""
        self.generation = -1
        self.assignment = b""
        self.left = False

    async def run(self) -> None:
        await asyncio.sleep(self.join_delay)
        loop = asyncio.get_running_loop()
        deadline = None if self.leave_after is None else loop.time() + self.leave_after
        while deadline is None or loop.time() < deadline:
            r = await join(self.c, member=self.member_id, session=400, rebalance=400,
                           require_known=True)
            if r.error == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error:
                if r.error == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await asyncio.sleep(0.01)
                continue
            self.member_id = r.member_id
            plan = {m: m.encode() for m, _, _ in r.members}
            s = await self.c.sync_group("g", r.generation, r.member_id, None, None, None, plan)
            if s.error:
                continue
            self.generation, self.assignment = r.generation, s.assignment
            while deadline is None or loop.time() < deadline:
                await asyncio.sleep(0.03)
                if self.c.heartbeat("g", self.generation, self.member_id, None):
                    break
        self.c.leave_group("g", [(self.member_id, None)])
        self.left = True


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.floats(0, 0.2),  # when the member arrives
            st.none() | st.floats(0.05, 0.4),  # how long it stays, if it leaves
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([0, 50]),
)
def test_members_converge_on_one_generation(plan, initial_delay_ms):
    async def go() -> None:
        c = coordinator(**{"group.initial.rebalance.delay.ms": str(initial_delay_ms)})
        clients = [Client(c, arrive, stay) for arrive, stay in plan]
        tasks = [asyncio.ensure_future(cl.run()) for cl in clients]
        loop = asyncio.get_running_loop()
        end = loop.time() + 8
        try:
            while True:
                await asyncio.sleep(0.05)
                staying = [cl for cl in clients if cl.leave_after is None]
                leavers_done = all(cl.left for cl in clients if cl.leave_after is not None)
                group = c.groups.get("g")
                if leavers_done and group is not None and (
                    not staying and group.state is GroupState.EMPTY
                    or group.state is GroupState.STABLE
                    and set(group.members) == {cl.member_id for cl in staying}
                    and all(cl.generation == group.generation for cl in staying)
                    and all(cl.assignment == cl.member_id.encode() for cl in staying)
                ):
                    return
                assert loop.time() < end, f"no convergence: {group}"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await c.stop()

    asyncio.run(go())
