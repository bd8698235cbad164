"""Property: whatever the arrival order and whoever leaves, well-behaved members that keep
rejoining on errors end in one Stable generation where each holds the leader's assignment."""

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.test_coordinator_groups import coordinator, join

from chronik.coordinator.group import GroupState

MEMBER_ID_REQUIRED = 79
UNKNOWN_MEMBER_ID = 25


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
