"""One client connection: read frames, run handlers, write responses in order.

On a SASL listener, until authenticated, requests are taken one at a time and only
ApiVersions, SaslHandshake and SaslAuthenticate are served. With a session lifetime
(connections.max.reauth.ms, KIP-368) a SaslHandshake on an authenticated connection
starts a re-authentication: the requests read before it are served as they were, with
the principal they came with; from it on, requests are again taken one at a time and
only those three served, until the exchange completes (with the same user: anything
else closes the connection). Once the session has expired, any request but a
SaslHandshake closes the connection, as Kafka's SocketServer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from chronik.broker.context import RequestContext, Throttle
from chronik.broker.tls_stream import TLSStreamReader
from chronik.protocol import compat, guard
from chronik.protocol.framing import (
    SIZE,
    MalformedRequest,
    frame,
    parse_header,
    parse_header_prefix,
    response_header,
)
from chronik.security.principal import ANONYMOUS
from chronik.security.sasl import AuthenticationFailed, SaslSession, State
from chronik.storage.file_region import FileRegion

if TYPE_CHECKING:
    from chronik.broker.server import Broker
    from chronik.security.listeners import ListenerSpec

log = logging.getLogger("chronik.connection")
T = TypeVar("T")

API_VERSIONS_KEY = 18
# The one API whose responses may name file regions (chronik.storage.file_region).
FETCH_KEY = 1
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
# What a connection on a SASL listener may ask before it has authenticated.
BEFORE_AUTHENTICATION = (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
# Flow control per connection. At most MAX_WORKING requests still being worked
# on (a produce stops counting once appended, while it waits for its fsync), so a
# busy connection keeps a short backlog in front of everyone else's requests; and
# at most MAX_QUEUED awaiting their response, so pipelined acks=all produces can
# share one group commit.
MAX_WORKING = 8
MAX_QUEUED = 32
BODY_CHUNK = 2**20
# Under TLS a response goes to the SSL object in pieces of at most TLS_CHUNK bytes, each
# once the transport has drained below its high-water mark: handed over whole, a
# multi-megabyte Fetch response is encrypted at once into a buffer that grows to its
# size and is copied out again in one piece (fresh pages, faulted in, on every
# response). Small parts (headers, sizes) are joined with their neighbours up to a
# TLS_RECORD boundary, so that they do not each make a record of a few bytes.
TLS_CHUNK = 2**18
TLS_RECORD = 2**14


class Pending:
    """A request between arrival and its response being written.

    Two moments of it hold up the next request on the connection: ``released`` (it no
    longer needs to run alone: a produce once appended) and ``written`` (its response is
    in a transport below its high-water mark, or there is none: only then may a request
    that is not pipelined start, so a client that does not read holds one response, not
    one per request). Each is a flag, and a future only for a request that has to wait
    on it: most requests find the one before them released already.
    """

    __slots__ = (
        "api_key",
        "task",
        "request_bytes",
        "is_released",
        "is_written",
        "_released",
        "_written",
    )

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        self.task: asyncio.Task[list[bytes] | None] | None = None
        self.request_bytes = 0
        self.is_released = False
        self.is_written = False
        self._released: asyncio.Future[None] | None = None
        self._written: asyncio.Future[None] | None = None

    @property
    def released(self) -> asyncio.Future[None]:
        fut = self._released
        if fut is None:
            fut = self._released = _flag_future(self.is_released)
        return fut

    @property
    def written(self) -> asyncio.Future[None]:
        fut = self._written
        if fut is None:
            fut = self._written = _flag_future(self.is_written)
        return fut

    def release(self) -> None:
        if not self.is_released:
            self.is_released = True
            fut = self._released
            if fut is not None and not fut.done():
                fut.set_result(None)

    def mark_written(self) -> None:
        if not self.is_written:
            self.is_written = True
            fut = self._written
            if fut is not None and not fut.done():
                fut.set_result(None)


def _flag_future(done: bool) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if done:
        fut.set_result(None)
    return fut


class Route(NamedTuple):
    """How a request of one API version is taken: its handler module, its kio request
    class and whether that is flexible, whether the handler is pipelined, and its
    ``eager`` test, if it has one (see Connection._start)."""

    handler: Any
    request_cls: type
    flexible: bool
    pipelined: bool
    eager: Callable[[Any], bool] | None


class Connection:
    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: ListenerSpec | None = None,
    ) -> None:
        self.broker = broker
        self.listener = listener.name if listener is not None else "PLAINTEXT"
        self.sasl: SaslSession | None = (
            broker.security.sasl_session(self.listener)
            if listener is not None and listener.sasl
            else None
        )
        self.tls_principal = ANONYMOUS
        self.tls = listener is not None and listener.tls
        if listener is not None and listener.tls and not listener.sasl:
            # Raises PrincipalRuleError for a subject no rule maps: serve() is not reached.
            self.tls_principal = broker.security.tls_principal(writer.get_extra_info("peercert"))
        self.pool = broker.memory_pool
        self.reader = reader
        self.writer = writer
        # sendfile(2) writes to the socket itself, past the SSL layer: plaintext only.
        sock = writer.get_extra_info("socket")
        self.sock_fd = sock.fileno() if sock is not None and not self.tls else -1
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = peer[0] if peer else ""
        self.queue: deque[Pending] = deque()
        # The responder waits on _more for a request queued (or the connection closing);
        # the reader on _room for a place in a full queue. Both run on the event loop
        # alone, so a future each is all the signalling they need.
        self._more: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._routes: dict[tuple[int, int], Route] = {}
        self.closing = False
        # The socket is closed: requests still queued are not worked on.
        self.gone = False
        self.reading: asyncio.Task[None] | None = None
        self.done = asyncio.Event()
        # Cleared while a written response waits for the client to read it: no new
        # request is read meanwhile (Kafka mutes such a channel).
        self.writable = asyncio.Event()
        self.writable.set()
        # For connections.max.idle.ms: when something last happened, how many
        # handlers are running, and the unsent bytes seen at the last look.
        self.active_at = time.monotonic()
        self.handling = 0
        self.waiting_for_memory = False
        self._backlog_seen = 0

    @property
    def principal(self) -> str:
        if self.sasl is not None:
            # Kept through a re-authentication, which cannot change it.
            return f"User:{self.sasl.user}" if self.sasl.authenticated else ANONYMOUS
        return self.tls_principal

    async def serve(self) -> None:
        responder = asyncio.create_task(self._respond())
        self.reading = asyncio.create_task(self._read_loop())
        try:
            await self.reading
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except Exception as exc:
            # One line, no traceback: under descriptor starvation even reading the
            # source lines of a traceback fails.
            log.error(
                "closing connection from %s: %s: %s",
                self.peer,
                type(exc).__name__,
                exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
        finally:
            self.closing = True
            self._notify_responder()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await responder
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
            self._forget()
            self.done.set()

    async def drain_and_close(self, timeout: float | None = None) -> None:
        """Stop reading new requests; the ones already read are still answered (within
        ``timeout`` seconds: a client that does not read its responses is cut off)."""
        self.closing = True
        if self.reading is not None and not self.reading.done():
            self.reading.cancel()
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            self.writer.transport.abort()
            await self.done.wait()

    def idle_seconds(self, now: float) -> float:
        """How long nothing has happened here: no request read, none being worked on,
        no byte of a response taken by the client."""
        if self.handling or self.waiting_for_memory:
            self.active_at = now
            return 0.0
        backlog = self.writer.transport.get_write_buffer_size()
        if backlog != self._backlog_seen:
            self._backlog_seen = backlog
            self.active_at = now
        return now - self.active_at

    def close_idle(self) -> None:
        self.closing = True
        transport = self.writer.transport
        if transport.get_write_buffer_size():
            transport.abort()  # the client is not reading: what is buffered cannot go
        else:
            transport.close()
        if self.reading is not None and not self.reading.done():
            self.reading.cancel()

    def _forget(self) -> None:
        """The socket is closed: give back the memory still held for its requests, and
        let requests waiting on earlier responses finish without running."""
        self.gone = True
        for pending in self.queue:
            self._release_request(pending)
            pending.mark_written()

    def _release_request(self, pending: Pending) -> None:
        if pending.request_bytes:
            self.pool.release(pending.request_bytes)
            pending.request_bytes = 0

    def _notify_responder(self) -> None:
        fut = self._more
        if fut is not None:
            self._more = None
            if not fut.done():
                fut.set_result(None)

    async def _read_loop(self) -> None:
        max_size = self.broker.config.socket_request_max_bytes
        pool = self.pool
        reader = self.reader
        queue = self.queue
        # A request already whole in the StreamReader's buffer (pipelined requests, or a
        # small one) is taken from it at once, without the waits of reading it in pieces.
        # Under TLS the body goes through TLSStreamReader.read_body instead.
        fast = not self.tls
        previous: Pending | None = None
        self.throttled = throttled = Throttle()
        while not self.closing:
            if not self.writable.is_set():
                await self.writable.wait()
            if throttled.until:
                delay = throttled.remaining()
                if delay > 0:  # throttled by a quota (KIP-219): nothing is read meanwhile
                    await asyncio.sleep(delay)
            sasl = self.sasl
            authenticating = sasl is not None and not sasl.complete
            if authenticating:
                assert sasl is not None
                # One request at a time until authenticated: each answer decides what
                # may come next (and, after a v0 handshake, that it is a bare token).
                if previous is not None:
                    await previous.written
                    if sasl.state is State.FAILED:
                        return
                if sasl.raw and sasl.state is State.AUTHENTICATE:
                    await self._raw_sasl_token(sasl)
                    continue
            data: bytes | bytearray | None = None
            buf = reader._buffer
            if fast and not authenticating and len(buf) >= 12 and reader._exception is None:
                # The same checks as below; anything out of the ordinary (a size to
                # refuse, a body still arriving, no room in the budget) goes the long way.
                (size,) = SIZE.unpack_from(buf)
                end = size + 4
                if 8 <= size <= max_size and len(buf) >= end and pool.try_reserve(size):
                    data = bytes(memoryview(buf)[4:end])
                    del buf[:end]
                    reader._maybe_resume_transport()
                    self.active_at = time.monotonic()
            if data is None:
                head = await reader.readexactly(4)
                self.active_at = time.monotonic()
                (size,) = SIZE.unpack(head)
                if authenticating:
                    # Before authentication, as Kafka: no request larger than a SASL token.
                    limit = self.broker.security.sasl_max_receive_size
                    if size > limit:
                        raise MalformedRequest(
                            f"request of {size} bytes before SASL authentication is larger "
                            f"than sasl.server.max.receive.size ({limit})"
                        )
                if size > max_size:
                    raise MalformedRequest(
                        f"request of {size} bytes is larger than socket.request.max.bytes "
                        f"({max_size})"
                    )
                if size < 8:
                    raise MalformedRequest(f"request size {size} is shorter than a header")
                # The body is read only once the budget has room for it: while it has
                # none, this socket is not read (backpressure, as Kafka's MemoryPool).
                if not pool.try_reserve(size):
                    self.waiting_for_memory = True
                    try:
                        await pool.reserve(size)
                    finally:
                        self.waiting_for_memory = False
                buf = reader._buffer
                if fast and len(buf) >= size and reader._exception is None:
                    # The body came with its size: taken at once, as above.
                    data = bytes(memoryview(buf)[:size])
                    del buf[:size]
                    reader._maybe_resume_transport()
                else:
                    try:
                        data = await self._read_body(size)
                    except BaseException:
                        pool.release(size)
                        raise
            try:
                pending = self._start(data, previous)
            except BaseException:
                pool.release(size)
                raise
            del data
            if pending is None:
                pool.release(size)
                return
            previous = pending
            queue.append(pending)
            if self._more is not None:
                self._notify_responder()
            while len(queue) >= MAX_QUEUED and not self.closing:
                self._room = room = asyncio.get_running_loop().create_future()
                await room
            while not self.closing and len(queue) >= MAX_WORKING:
                working = [p.released for p in queue if not p.is_released]
                if len(working) < MAX_WORKING:
                    break
                await asyncio.wait(working, return_when=asyncio.FIRST_COMPLETED)

    async def _raw_sasl_token(self, sasl: SaslSession) -> None:
        """A token after a v0 SaslHandshake: a bare size and bytes each way."""
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        limit = self.broker.security.sasl_max_receive_size
        if not 0 <= size <= limit:
            raise MalformedRequest(
                f"SASL token of {size} bytes is larger than sasl.server.max.receive.size ({limit})"
            )
        token = await self.reader.readexactly(size)
        self.active_at = time.monotonic()
        try:
            answer = await sasl.authenticate(token)
        except AuthenticationFailed as exc:
            await self.broker.security.authentication_failed(self.client_host, sasl, str(exc))
            self.closing = True
            return
        if sasl.complete:
            self.broker.security.authenticated(sasl)
        self.writer.write(SIZE.pack(len(answer)) + answer)
        await self.writer.drain()

    async def _read_body(self, size: int) -> bytes | bytearray:
        # In pieces, so that a body still arriving counts as activity and one that
        # stopped arriving does not (connections.max.idle.ms).
        if isinstance(self.reader, TLSStreamReader):
            return await self.reader.read_body(size, self._arrived)
        chunks: list[bytes] = []
        left = size
        while left:
            chunk = await self.reader.read(min(left, BODY_CHUNK))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", size)
            chunks.append(chunk)
            left -= len(chunk)
            self.active_at = time.monotonic()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _arrived(self) -> None:
        self.active_at = time.monotonic()

    def _start(self, data: bytes | bytearray, previous: Pending | None) -> Pending | None:
        api_key, api_version, correlation_id = parse_header_prefix(data)
        route = self._routes.get((api_key, api_version))
        if route is None:
            handler = self.broker.handler_for(api_key)
            if handler is None:
                log.warning("closing connection from %s: unknown API key %d", self.peer, api_key)
                return None
        else:
            handler = route.handler
        sasl = self.sasl
        if sasl is not None:
            if sasl.complete:
                now = time.monotonic()
                if api_key == SASL_HANDSHAKE_KEY and sasl.begin_reauthentication(now):
                    # Decided here, as the request is read: what is read after it waits
                    # for its answer and is gated as before authentication.
                    log.debug("re-authentication of %s from %s begins", self.principal, self.peer)
                elif sasl.expired(now):
                    self.broker.security.session_expired(self.peer, sasl, api_key)
                    return None
            if not sasl.complete and api_key not in BEFORE_AUTHENTICATION:
                log.warning(
                    "closing connection from %s: API %d before SASL authentication on listener %s",
                    self.peer,
                    api_key,
                    self.listener,
                )
                return None
        pending = Pending(api_key)
        # The budget reserved for it: given back once its handler is done (or with its
        # response, if it never runs).
        pending.request_bytes = len(data)
        if route is None:
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
            pipelined = getattr(handler, "PIPELINED", False)
            if getattr(handler, "RAW", False):
                # chronik's own APIs (not Kafka's): the handler module decodes the body,
                # here, so a malformed one is refused like any other (a log line, the
                # connection closed).
                header = parse_header(data, False)
                request: Any = handler.decode_request(bytes(data[header.body_offset :]))
                response_flexible = False
            else:
                request_cls = compat.request_class(api_key, api_version)
                route = Route(
                    handler,
                    request_cls,
                    request_cls.__flexible__,
                    pipelined,
                    getattr(handler, "eager", None),
                )
                self._routes[api_key, api_version] = route
        if route is not None:
            request_cls = route.request_cls
            header = parse_header(data, route.flexible)
            # kio sizes arrays from the wire before reading them: a lying length must be
            # refused here, where it costs a log line, not in kio, where it aborts the
            # process.
            try:
                guard.check(request_cls, data, header.body_offset)
            except MalformedRequest as exc:
                raise MalformedRequest(f"API {api_key} v{api_version}: {exc}") from None
            try:
                # kio reads only immutable buffers; a TLS body is read into a bytearray.
                body = memoryview(data).toreadonly() if isinstance(data, bytearray) else data
                request, _ = compat.decode(request_cls, body, header.body_offset)
            except Exception as exc:
                raise MalformedRequest(
                    f"cannot decode API {api_key} v{api_version}: {exc}"
                ) from exc
            response_flexible = route.flexible and api_key != API_VERSIONS_KEY
            pipelined = route.pipelined
        ctx = RequestContext(
            services=self.broker,
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            client_host=self.client_host,
            sasl=sasl,
            listener=self.listener,
            principal=self.tls_principal if sasl is None else self.principal,
            size=len(data),
            throttled=self.throttled,
            sendfile=self.sock_fd >= 0,
        )
        run = self._run(handler, ctx, request, previous, pending, response_flexible, pipelined)
        if (
            route is not None
            and route.eager is not None
            and (previous is None or previous.is_released)
            and route.eager(request)
        ):
            # A request its handler says needs no wait (an acks=1 Produce) is worked on
            # here and now, with no task and no turn of the event loop of its own.
            pending.task = _run_now(run)
        else:
            pending.task = asyncio.create_task(run)
        return pending

    async def _run(
        self,
        handler: Any,
        ctx: RequestContext,
        request: Any,
        previous: Pending | None,
        pending: Pending,
        flexible: bool,
        pipelined: bool,
    ) -> list[bytes] | None:
        try:
            if previous is not None:
                if not previous.is_released:
                    await previous.released
                if not pipelined and not previous.is_written:
                    await previous.written
            if self.gone:
                return None
            self.handling += 1
            started = time.monotonic()
            try:
                if pipelined:
                    response = await handler.handle(ctx, request, pending.release)
                else:
                    response = await handler.handle(ctx, request)
            finally:
                self.handling -= 1
                self.active_at = ended = time.monotonic()
        finally:
            pending.release()
            if pending.request_bytes:
                self.pool.release(pending.request_bytes)
                pending.request_bytes = 0
        self.broker.metrics.observe_request(ctx.api_key, ended - started)
        if response is None:
            return None
        head = response_header(ctx.correlation_id, flexible)
        if isinstance(response, list):
            return [head, *response]
        return [head, compat.encode(response)]

    async def _respond(self) -> None:
        queue = self.queue
        while True:
            while not (queue or self.closing):
                self._more = more = asyncio.get_running_loop().create_future()
                await more
            if not queue:
                return
            pending = queue[0]
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
            answered: list[Pending] = []
            regions = False
            while queue and queue[0].task is not None and queue[0].task.done():
                task = queue[0].task
                if task.cancelled() or task.exception() is not None:
                    break
                done = queue.popleft()
                answered.append(done)
                parts = task.result()
                if parts is not None:
                    out.extend(frame(parts))
                    regions = regions or done.api_key == FETCH_KEY
            room = self._room
            if room is not None and len(queue) < MAX_QUEUED:
                self._room = None
                if not room.done():
                    room.set_result(None)
            # A task keeps its result: drop every reference so the bytes go once sent.
            task = parts = None
            for done in answered:
                if done.request_bytes:
                    self._release_request(done)
                done.task = None
            try:
                if out:
                    size = sum(map(len, out))
                    # Held until the transport has taken all but its low-water mark.
                    self.pool.force(size)
                    self.writable.clear()
                    try:
                        if self.tls:
                            for piece in tls_pieces(out):
                                self.writer.write(piece)
                                await self.writer.drain()
                        elif regions and self.sock_fd >= 0:
                            self._write_regions(out)
                        else:
                            self.writer.writelines(out)
                        del out
                        await self.writer.drain()
                    except ConnectionError:
                        self._abort()
                        return
                    except OSError as exc:
                        # A file region's segment shortened or gone since the fetch was
                        # answered: its stated size cannot be kept.
                        log.warning("closing the connection from %s: a fetch response "
                                    "could not be sent: %s", self.peer, exc)
                        self._abort()
                        return
                    finally:
                        self.pool.release(size)
                        self.writable.set()
                    self.active_at = time.monotonic()
            finally:
                for done in answered:
                    done.mark_written()

    def _write_regions(self, out: list[Any]) -> None:
        """Write ``out``, whose file regions go from the file to the socket by sendfile
        while the transport holds nothing to send before them; one that finds bytes
        queued, or the socket full, is read and queued after them as bytes."""
        transport = self.writer.transport
        if transport.is_closing():
            return  # its descriptor may be closed, even another file's by now
        sock_fd = self.sock_fd
        run: list[Any] = []
        for part in out:
            if type(part) is not FileRegion:
                run.append(part)
                continue
            if run:
                transport.writelines(run)
                run = []
            sent = 0
            if not transport.get_write_buffer_size():
                sent = part.send(sock_fd)
            if sent < part.size:
                transport.write(part.read(sent))
        if run:
            transport.writelines(run)

    def _abort(self) -> None:
        self.closing = True
        if self.reading is not None:
            self.reading.cancel()


def tls_pieces(parts: list[bytes]) -> Iterator[bytes | memoryview]:
    """``parts`` as writes for an SSL transport: large parts as views of at most
    TLS_CHUNK bytes (not copied); small parts, with the head and tail of the large parts
    around them, joined into one piece that ends on a TLS record boundary (a run of small
    parts alone may pass TLS_CHUNK by less than a record)."""
    small: list[bytes | memoryview] = []
    small_size = 0
    for part in parts:
        size = len(part)
        if not size:
            continue
        if size < TLS_RECORD:
            small.append(part)
            small_size += size
            if small_size >= TLS_CHUNK:
                yield b"".join(small)
                small, small_size = [], 0
            continue
        view = memoryview(part)
        start = 0
        if small:
            # Complete the record the small parts began.
            start = -small_size % TLS_RECORD
            small.append(view[:start])
            yield b"".join(small)
            small, small_size = [], 0
        # The whole records of the rest go as views; what is left joins the next parts.
        end = size - (size - start) % TLS_RECORD
        while start < end:
            stop = min(start + TLS_CHUNK, end)
            yield view[start:stop]
            start = stop
        if start < size:
            small.append(view[start:])
            small_size = size - start
    if small:
        yield b"".join(small)


async def _ready(parts: list[bytes]) -> list[bytes]:
    return parts


def _run_now(run: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Run ``run`` on the caller's turn of the event loop, as far as its first wait; a
    future of its outcome. One that does wait after all goes on in a task from there.
    Only for handlers whose part before that wait enters no ``asyncio.timeout`` (which
    would bind to the caller's task): the ``eager`` test of a handler promises it."""
    try:
        waited = run.send(None)
    except StopIteration as stop:
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        done.set_result(stop.value)
        return done
    except Exception as exc:
        failed: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        failed.set_exception(exc)
        return failed
    return asyncio.get_running_loop().create_task(_go_on(run, waited))


async def _go_on(run: Coroutine[Any, Any, T], waited: Any) -> T:
    return await _resume(run, waited)


@types.coroutine
def _resume(run: Coroutine[Any, Any, T], waited: Any) -> Generator[Any, Any, T]:
    """Hand the task what ``run`` yielded, and ``run`` what the task sends or throws
    back, until it returns: what ``await`` does for a coroutine from its start."""
    while True:
        try:
            sent = yield waited
        except BaseException as exc:
            try:
                waited = run.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waited = run.send(sent)
            except StopIteration as stop:
                return stop.value
