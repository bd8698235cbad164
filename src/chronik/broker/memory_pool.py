"""The broker-wide budget for request and response bytes in flight.

As Kafka's MemoryPool (queued.max.request.bytes) it is not strict: a reservation
succeeds while anything is left, so one request larger than what is left still
gets in (the pool then dips below zero by at most that request) and nothing ever
waits for bytes that can never come. While nothing is left, connections stop
reading: backpressure, not an error. Responses are charged once they are built
(their size is known only then) and kept until the socket has taken them.
"""

from __future__ import annotations

import asyncio
from collections import deque


class MemoryPool:
    def __init__(self, size: int) -> None:
        """``size`` < 0: unbounded (Kafka's -1)."""
        self.size = size
        self.unbounded = size < 0
        self.available = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def exhausted(self) -> bool:
        return not self.unbounded and self.available <= 0

    async def reserve(self, n: int) -> None:
        """Take ``n`` bytes, waiting while nothing is left."""
        if not self.unbounded and (self.available <= 0 or self._waiters):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    # Woken but gone: pass the turn on.
                    self._wake()
                raise
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        self.available -= n
        self._wake()

    def try_reserve(self, n: int) -> bool:
        """Take ``n`` bytes if that needs no wait (what ``reserve`` would do at once);
        False, with nothing taken, when the caller must wait in ``reserve``."""
        if self.unbounded or (self.available > 0 and not self._waiters):
            self.available -= n
            return True
        return False

    def force(self, n: int) -> None:
        """Charge bytes that already exist (a response just built)."""
        self.available -= n

    def release(self, n: int) -> None:
        self.available += n
        if self._waiters:
            self._wake()

    def room(self, wanted: int) -> int:
        """How much of ``wanted`` fits in what is left (at least 0)."""
        if self.unbounded:
            return wanted
        return max(0, min(wanted, self.available))

    def _wake(self) -> None:
        # Waiters go in arrival order, one at a time: each takes its share before
        # the next one looks at what is left.
        while self._waiters and (self.unbounded or self.available > 0):
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
