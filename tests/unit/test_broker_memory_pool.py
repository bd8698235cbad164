"""The broker-wide memory budget: non-strict as Kafka's pool, waiters in order."""

from __future__ import annotations

import asyncio

from chronik.broker.memory_pool import MemoryPool


def run(coro):
    return asyncio.run(coro)


def test_a_request_larger_than_what_is_left_still_gets_in():
    async def scenario() -> None:
        pool = MemoryPool(100)
        await pool.reserve(60)
        await asyncio.wait_for(pool.reserve(500), 1)  # 40 left: admitted, pool goes negative
        assert pool.available == -460 and pool.exhausted

    run(scenario())


def test_waiters_wait_while_nothing_is_left_and_go_in_arrival_order():
    async def scenario() -> None:
        pool = MemoryPool(10)
        await pool.reserve(10)
        order: list[str] = []

        async def take(name: str, n: int) -> None:
            await pool.reserve(n)
            order.append(name)

        first = asyncio.create_task(take("first", 5))
        second = asyncio.create_task(take("second", 5))
        await asyncio.sleep(0.01)
        assert order == []
        pool.release(5)
        await asyncio.sleep(0.01)
        assert order == ["first"]  # 5 given back, 5 taken: nothing left for the second
        pool.release(10)
        await asyncio.wait_for(second, 1)
        await first
        assert order == ["first", "second"] and pool.available == 5

    run(scenario())


def test_a_cancelled_waiter_passes_its_turn_on():
    async def scenario() -> None:
        pool = MemoryPool(1)
        await pool.reserve(1)
        gone = asyncio.create_task(pool.reserve(1))
        kept = asyncio.create_task(pool.reserve(1))
        await asyncio.sleep(0.01)
        gone.cancel()
        pool.release(1)
        await asyncio.wait_for(kept, 1)
        assert pool.available == 0

    run(scenario())


def test_unbounded_pool_never_waits_and_room_is_what_is_left():
    async def scenario() -> None:
        unbounded = MemoryPool(-1)
        await asyncio.wait_for(unbounded.reserve(10**12), 1)
        assert unbounded.room(500) == 500 and not unbounded.exhausted
        pool = MemoryPool(100)
        await pool.reserve(70)
        assert pool.room(500) == 30 and pool.room(10) == 10
        pool.force(50)
        assert pool.room(500) == 0

    run(scenario())
