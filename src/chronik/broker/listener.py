"""Accepting client connections, within max.connections and max.connections.per.ip.

As Kafka's Acceptor: at max.connections the broker stops accepting (clients wait
in the listen backlog) until a connection closes; a connection over its address's
max.connections.per.ip is accepted and closed at once. When accept fails for
lack of descriptors or memory, accepting pauses (doubling from 10 ms to 1 s, or
until a connection closes) and the failure is logged at most once per
LOG_INTERVAL seconds with a count, instead of once per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from chronik.broker.tls_stream import TLSStreamProtocol, TLSStreamReader

log = logging.getLogger("chronik.broker")

LOG_INTERVAL = 10.0
FIRST_BACKOFF = 0.01
MAX_BACKOFF = 1.0
BACKLOG = 1024
# Bytes a connection's reader buffers beyond what it was asked for.
STREAM_LIMIT = 2**20
# The client gave up between the kernel's accept queue and us.
_GONE = (errno.ECONNABORTED, errno.EPROTO, errno.ECONNRESET, errno.EPERM)

# A TLS handshake that has not finished in this time closes the connection.
TLS_HANDSHAKE_SECONDS = 10.0

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Any], Awaitable[None]]


@dataclass
class Bound:
    """A listening socket, what its connections are handed to the handler with, and the
    TLS context its connections are wrapped in (None: plaintext)."""

    sock: socket.socket
    tag: Any = None
    tls: ssl.SSLContext | None = None


def listen(sockets: list[socket.socket]) -> None:
    """Start taking connections on sockets from ``bind``: once every listener is bound,
    a client that found one port open finds the others open too."""
    for sock in sockets:
        sock.listen(BACKLOG)


async def bind(host: str, port: int) -> list[socket.socket]:
    """Bound sockets for every address ``host`` resolves to, as asyncio binds them; not
    listening yet (see ``listen``), so that a broker with several listeners opens all of
    them at once rather than one after another."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # Every address on one port (the first free one for port 0): clients are
            # told a single port.
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _RateLimitedLog:
    """One line per interval for a repeating event, with how often it happened."""

    def __init__(self, message: str, interval: float = LOG_INTERVAL) -> None:
        self.message = message + " (%d times since the last report)"
        self.interval = interval
        self.count = 0
        self.last = -interval

    def __call__(self, *args: object) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= self.interval:
            log.warning(self.message, *args, self.count)
            self.count = 0
            self.last = now


class Listener:
    def __init__(
        self,
        sockets: list[Bound],
        handler: Handler,
        max_connections: int,
        max_per_ip: int,
        per_ip_overrides: dict[str, int],
    ) -> None:
        self.sockets = sockets
        self.handler = handler
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = per_ip_overrides
        self.open = 0
        self.per_ip: Counter[str] = Counter()
        self._closed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._starved_log = _RateLimitedLog(
            "cannot accept connections on port %d: %s; %d open; retrying"
        )
        self._rejected_log = _RateLimitedLog(
            "closed a new connection from %s: it has max.connections.per.ip (%d) open"
        )
        self._tls_failed_log = _RateLimitedLog("TLS handshake with %s failed: %s")
        self._failed_accepts = 0
        self._recovered_logged = -LOG_INTERVAL

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._accept_loop(b)) for b in self.sockets]

    async def close(self) -> None:
        # The sockets leave the selector first: in Python 3.11 a connection arriving as a
        # pending sock_accept is cancelled makes its callback set a result on the
        # cancelled future, and the loop logs an InvalidStateError traceback.
        loop = asyncio.get_running_loop()
        for bound in self.sockets:
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(bound.sock.fileno())
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for bound in self.sockets:
            bound.sock.close()

    async def _accept_loop(self, bound: Bound) -> None:
        loop = asyncio.get_running_loop()
        sock = bound.sock
        backoff = FIRST_BACKOFF
        while True:
            while self.open >= self.max_connections:
                self._closed.clear()
                await self._closed.wait()
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _GONE:
                    continue
                # Out of descriptors or memory (or anything else accept can say):
                # pause, and say so at most once per interval.
                self._failed_accepts += 1
                self._starved_log(
                    sock.getsockname()[1],
                    exc.strerror,
                    self.open,
                )
                self._closed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff):
                        await self._closed.wait()
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = FIRST_BACKOFF
            if self._failed_accepts:
                # Also at most once per interval: at the edge of the limit accepting
                # can fail and recover over and over.
                now = time.monotonic()
                if now - self._recovered_logged >= LOG_INTERVAL:
                    log.info(
                        "accepting connections again after %d failed attempts",
                        self._failed_accepts,
                    )
                    self._recovered_logged = now
                    self._failed_accepts = 0
            self._admit(conn, address, bound)

    def _admit(self, conn: socket.socket, address: tuple[object, ...], bound: Bound) -> None:
        host = str(address[0]) if address else ""
        limit = self.per_ip_overrides.get(host, self.max_per_ip)
        if self.per_ip[host] >= limit:
            conn.close()
            self._rejected_log(
                host,
                limit,
            )
            return
        self.open += 1
        self.per_ip[host] += 1
        task = asyncio.create_task(self._serve(conn, host, bound))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket, host: str, bound: Bound) -> None:
        loop = asyncio.get_running_loop()
        try:
            reader: asyncio.StreamReader
            if bound.tls is None:
                reader = asyncio.StreamReader(limit=STREAM_LIMIT)
                protocol = asyncio.StreamReaderProtocol(reader)
            else:
                reader = TLSStreamReader(limit=STREAM_LIMIT)
                protocol = TLSStreamProtocol(reader)
            try:
                if bound.tls is None:
                    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=conn)
                else:
                    transport, _ = await loop.connect_accepted_socket(
                        lambda: protocol,
                        sock=conn,
                        ssl=bound.tls,
                        ssl_handshake_timeout=TLS_HANDSHAKE_SECONDS,
                    )
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                if bound.tls is not None:
                    self._tls_failed_log(host, str(exc) or type(exc).__name__)
                conn.close()
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self.handler(reader, writer, bound.tag)
        finally:
            self.open -= 1
            self.per_ip[host] -= 1
            if not self.per_ip[host]:
                del self.per_ip[host]
            self._closed.set()
