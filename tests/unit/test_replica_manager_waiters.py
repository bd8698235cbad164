"""acks=all produces waiting on a leader for the high watermark (ReplicaManager
.wait_replicated): released once it passes their offset, in any order of arrival;
answered REQUEST_TIMED_OUT at their own deadline by the manager's one timer, each at its
own, the others left waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_replica_manager_leading import NODE, manager, replica
from test_storage_support import append, client_batch, open_log

from chronik.cluster.replica_manager import LEADER, FollowerState
from chronik.protocol import errors


def leader(tmp_path: Path):
    rm = manager()
    rm.node.lease_held = lambda: True
    plog = open_log(tmp_path / "t-0")
    plog.replicated = True
    r = replica(rm, plog, LEADER, 1)
    r.followers = {2: FollowerState(leo=0)}
    for _ in range(6):
        append(plog, client_batch(1))
    return rm, r


def test_waiters_are_released_by_the_high_watermark_and_time_out_at_their_deadline(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        rm, r = leader(tmp_path)
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Out of offset order, and with deadlines in another order again.
        late = asyncio.ensure_future(rm.wait_replicated("t", 0, 6, 0.6))
        early = asyncio.ensure_future(rm.wait_replicated("t", 0, 2, 5.0))
        short = asyncio.ensure_future(rm.wait_replicated("t", 0, 4, 0.2))
        await asyncio.sleep(0.05)
        assert len(r.waiters) == 3
        # The follower fetches at offset 3: the high watermark moves to 3.
        assert rm.follower_fetch("t", 0, 2, 3, 1) == errors.NONE
        assert await early == (errors.NONE, None)
        code, message = await short
        assert code == errors.REQUEST_TIMED_OUT and "not replicated" in (message or "")
        assert 0.2 <= loop.time() - started < 0.5
        assert not late.done()
        code, _ = await late
        assert code == errors.REQUEST_TIMED_OUT
        assert 0.6 <= loop.time() - started < 0.9
        assert r.waiters == [] and rm._expiry is None and rm._waiting == {}

    asyncio.run(run())


def test_a_cancelled_waiter_leaves_the_others_and_the_timer_goes_on(tmp_path: Path) -> None:
    async def run() -> None:
        rm, r = leader(tmp_path)
        gone = asyncio.ensure_future(rm.wait_replicated("t", 0, 5, 0.1))
        kept = asyncio.ensure_future(rm.wait_replicated("t", 0, 5, 10.0))
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0.2)  # past the cancelled one's deadline
        assert not kept.done() and len(r.waiters) == 1
        assert rm._expiry is not None  # set again for the one left
        rm.follower_fetch("t", 0, 2, 6, 1)
        assert await kept == (errors.NONE, None)
        assert NODE in r.isr

    asyncio.run(run())
