"""A request passed on to another broker's HTTP listener as it came (method, path and
query, body, credentials and content type), and its answer passed back: how a broker
that is not the schema registry's primary serves a write, and how the event store's API
and the console serve a key whose partition another broker leads
(chronik.http.leader_forward). HTTP/1.1, one request per connection, a bounded answer
(Content-Length only, as our own server sends).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from chronik.http.server import Request

MAX_ANSWER_BYTES = 16 * 1024 * 1024
FORWARDED_HEADERS = ("authorization", "content-type", "accept")


class ForwardFailed(Exception):
    pass


async def forward(
    request: Request,
    host: str,
    port: int,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    extra: dict[str, str] | None = None,
    names: tuple[str, ...] = FORWARDED_HEADERS,
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers by lower-case name) of ``request`` sent to host:port, with
    the request's headers of ``names`` and the ``extra`` ones."""
    try:
        return await asyncio.wait_for(
            _exchange(request, host, port, tls, extra or {}, names), timeout
        )
    except TimeoutError:
        raise ForwardFailed(f"no answer from {host}:{port} in {timeout:g} s") from None
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        raise ForwardFailed(f"{host}:{port}: {exc or type(exc).__name__}") from None


async def _exchange(
    request: Request,
    host: str,
    port: int,
    tls: ssl.SSLContext | None,
    extra: dict[str, str],
    names: tuple[str, ...],
) -> tuple[int, bytes, dict[str, str]]:
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname=host if tls else None
    )
    try:
        target = request.path + (f"?{request.query}" if request.query else "")
        lines = [f"{request.method} {target} HTTP/1.1", f"Host: {host}:{port}"]
        for name in names:
            if name in request.headers:
                lines.append(f"{name}: {request.headers[name]}")
        lines.extend(f"{name}: {value}" for name, value in extra.items())
        lines.append(f"Content-Length: {len(request.body)}")
        lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ")[1])
        headers: dict[str, str] = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length > MAX_ANSWER_BYTES:
            raise ValueError(f"an answer of {length} bytes")
        body = await reader.readexactly(length) if length else b""
        return status, body, headers
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
