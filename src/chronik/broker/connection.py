"""One client connection: read frames, run handlers, write responses in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from chronik.broker.context import RequestContext
from chronik.protocol import compat, guard
from chronik.protocol.framing import (
    SIZE,
    MalformedRequest,
    frame,
    parse_header,
    parse_header_prefix,
    response_header,
)

if TYPE_CHECKING:
    from chronik.broker.server import Broker

log = logging.getLogger("chronik.connection")

API_VERSIONS_KEY = 18
# Flow control per connection. At most MAX_WORKING requests still being worked
# on (a produce stops counting once appended, while it waits for its fsync), so a
# busy connection keeps a short backlog in front of everyone else's requests; and
# at most MAX_QUEUED awaiting their response, so pipelined acks=all produces can
# share one group commit.
MAX_WORKING = 8
MAX_QUEUED = 32


class Pending:
    """A request between arrival and its response being written."""

    __slots__ = ("api_key", "task", "released")

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        self.task: asyncio.Task[list[bytes] | None] | None = None
        self.released: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def release(self) -> None:
        if not self.released.done():
            self.released.set_result(None)


class Connection:
    def __init__(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = peer[0] if peer else ""
        self.queue: deque[Pending] = deque()
        self.queued = asyncio.Condition()
        self.closing = False
        self.reading: asyncio.Task[None] | None = None
        self.done = asyncio.Event()

    async def serve(self) -> None:
        responder = asyncio.create_task(self._respond())
        self.reading = asyncio.create_task(self._read_loop())
        try:
            await self.reading
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        finally:
            async with self.queued:
                self.closing = True
                self.queued.notify_all()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await responder
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
            self.done.set()

    async def drain_and_close(self) -> None:
        """Stop reading new requests; the ones already read are still answered."""
        self.closing = True
        if self.reading is not None and not self.reading.done():
            self.reading.cancel()
        await self.done.wait()

    async def _read_loop(self) -> None:
        max_size = self.broker.config.socket_request_max_bytes
        previous: Pending | None = None
        while not self.closing:
            head = await self.reader.readexactly(4)
            (size,) = SIZE.unpack(head)
            if size < 8 or size > max_size:
                raise MalformedRequest(f"request size {size} outside 8..{max_size}")
            data = await self.reader.readexactly(size)
            pending = self._start(data, previous)
            if pending is None:
                return
            previous = pending
            async with self.queued:
                self.queue.append(pending)
                self.queued.notify_all()
                await self.queued.wait_for(lambda: len(self.queue) < MAX_QUEUED or self.closing)
            while not self.closing:
                working = [p.released for p in self.queue if not p.released.done()]
                if len(working) < MAX_WORKING:
                    break
                await asyncio.wait(working, return_when=asyncio.FIRST_COMPLETED)

    def _start(self, data: bytes, previous: Pending | None) -> Pending | None:
        api_key, api_version, correlation_id = parse_header_prefix(data)
        handler = self.broker.handler_for(api_key)
        pending = Pending(api_key)
        if handler is None:
            log.warning("closing connection from %s: unknown API key %d", self.peer, api_key)
            return None
        low, high = handler.VERSIONS
        if not low <= api_version <= high:
            if api_key == API_VERSIONS_KEY:
                # Clients probe with their newest ApiVersions; a v0 body with error 35
                # and our ranges tells them which version to retry with.
                body = handler.unsupported_version_body(self.broker)
                pending.task = asyncio.create_task(
                    _ready([response_header(correlation_id, False), body])
                )
                pending.release()
                return pending
            log.warning(
                "closing connection from %s: API %d version %d not supported (%d-%d)",
                self.peer,
                api_key,
                api_version,
                low,
                high,
            )
            return None
        request_cls = compat.request_class(api_key, api_version)
        flexible = request_cls.__flexible__
        header = parse_header(data, flexible)
        # kio sizes arrays from the wire before reading them: a lying length must be
        # refused here, where it costs a log line, not in kio, where it aborts the process.
        try:
            guard.check(request_cls, data, header.body_offset)
        except MalformedRequest as exc:
            raise MalformedRequest(f"API {api_key} v{api_version}: {exc}") from None
        try:
            request, _ = compat.decode(request_cls, data, header.body_offset)
        except Exception as exc:
            raise MalformedRequest(f"cannot decode API {api_key} v{api_version}: {exc}") from exc
        ctx = RequestContext(
            broker=self.broker,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            client_host=self.client_host,
        )
        response_flexible = flexible and api_key != API_VERSIONS_KEY
        pending.task = asyncio.create_task(
            self._run(handler, ctx, request, previous, pending, response_flexible)
        )
        return pending

    async def _run(
        self,
        handler: Any,
        ctx: RequestContext,
        request: Any,
        previous: Pending | None,
        pending: Pending,
        flexible: bool,
    ) -> list[bytes] | None:
        try:
            if previous is not None:
                await previous.released
            started = time.perf_counter()
            if getattr(handler, "PIPELINED", False):
                response = await handler.handle(ctx, request, pending.release)
            else:
                response = await handler.handle(ctx, request)
        finally:
            pending.release()
        self.broker.metrics.observe_request(ctx.api_key, time.perf_counter() - started)
        if response is None:
            return None
        head = response_header(ctx.correlation_id, flexible)
        if isinstance(response, list):
            return [head, *response]
        return [head, compat.encode(response)]

    async def _respond(self) -> None:
        while True:
            async with self.queued:
                await self.queued.wait_for(lambda: self.queue or self.closing)
                if not self.queue:
                    return
                pending = self.queue[0]
            assert pending.task is not None
            try:
                await pending.task
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("request from %s failed; closing the connection", self.peer)
                self.broker.metrics.request_failed(pending.api_key)
                self._abort()
                return
            # Every response already finished goes out in one write and one drain.
            out: list[bytes] = []
            async with self.queued:
                while self.queue and self.queue[0].task is not None and self.queue[0].task.done():
                    task = self.queue[0].task
                    if task.cancelled() or task.exception() is not None:
                        break
                    self.queue.popleft()
                    parts = task.result()
                    if parts is not None:
                        out.extend(frame(parts))
                self.queued.notify_all()
            if out:
                self.writer.writelines(out)
                try:
                    await self.writer.drain()
                except ConnectionError:
                    self._abort()
                    return

    def _abort(self) -> None:
        self.closing = True
        if self.reading is not None:
            self.reading.cancel()


async def _ready(parts: list[bytes]) -> list[bytes]:
    return parts
