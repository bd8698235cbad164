"""HTTP/1.1 with keep-alive over asyncio streams, for the broker's HTTP APIs: the request
head and body read within limits, one JSON (or bytes) response per request, and bad
input answered with a 4xx status and a JSON error ({"error", "message", ...}), never a
crash. What a request means is the route's business (``route``); this module imports
nothing of chronik.

Limits: ``max_connections`` (more are answered 503 and closed), ``max_body`` bytes
(413), ``timeout`` seconds to send a request head or body and the most a kept-alive
connection may idle (408), a head of at most 16 KiB (431) and 100 header lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

log = logging.getLogger("chronik.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADER_LINES = 100
DRAIN_MAX_BYTES = 8 * 1024 * 1024

REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


class HttpError(Exception):
    def __init__(self, status: int, error: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": error, "message": message, **fields}
        self.headers: dict[str, str] = {}


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "peer")

    def __init__(self, method: str, target: str, headers: dict[str, str], peer: str) -> None:
        self.method = method
        path, _, query = target.partition("?")
        self.path = path
        self.query = query
        self.headers = headers
        self.body = b""
        self.peer = peer


def parse_listen(value: str) -> tuple[str, int, bool]:
    """(host, port, tls) of ``HOST:PORT``, ``http://HOST:PORT`` or ``https://HOST:PORT``."""
    tls = False
    text = value.strip()
    if text.startswith("https://"):
        tls, text = True, text[len("https://") :]
    elif text.startswith("http://"):
        text = text[len("http://") :]
    host, sep, port = text.rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"http.listen wants [http[s]://]HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port), tls


# (status, body, headers): a body that is not bytes is sent as JSON.
Response = tuple[int, Any, dict[str, str]]
Route = Callable[[Request], Awaitable[Response]]


class HttpServer:
    @classmethod
    def configured(cls, route: Route, values: Mapping[str, str]) -> HttpServer:
        """A server with the limits the settings give: http.max.connections,
        http.max.body.bytes and http.request.timeout.ms (ValueError for a bad one)."""
        return cls(
            route,
            max_connections=_setting(values, "http.max.connections", 1),
            max_body=_setting(values, "http.max.body.bytes", 1),
            timeout=_setting(values, "http.request.timeout.ms", 1) / 1000,
        )

    def __init__(self, route: Route, max_connections: int, max_body: int, timeout: float) -> None:
        self.route = route
        self.max_connections = max_connections
        self.max_body = max_body
        self.timeout = timeout
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def serve_listen(
        self, listen: str, tls: ssl.SSLContext | None, setting: str, start: bool = True
    ) -> tuple[str, str, int]:
        """Bind to ``listen`` ([http[s]://]HOST:PORT, the value of ``setting``): (scheme,
        host, bound port). https:// needs the broker's TLS context ``tls``. Without
        ``start``, connections wait in the backlog until start_serving()."""
        host, port, secure = parse_listen(listen)
        if secure and tls is None:
            raise ValueError(
                f"https:// in {setting} needs the broker's TLS key store "
                "(a listener with SSL and ssl.keystore.location)"
            )
        bound = await self.serve(host, port, tls if secure else None, start)
        return ("https" if secure else "http"), host, bound

    async def serve(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None = None, start: bool = True
    ) -> int:
        """Listen (bind only, without ``start``); returns the bound port."""
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=MAX_HEAD_BYTES, reuse_address=True, ssl=ssl_context,
            start_serving=start,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def start_serving(self) -> None:
        if self._server is not None:
            await self._server.start_serving()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 0.1)
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if len(self._connections) >= self.max_connections:
                err = HttpError(503, "too_many_connections", "http.max.connections reached")
                await self._send(writer, err.status, err.body, close=True)
                return
            self._connections.add(task)
            await self._serve_connection(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("HTTP connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peername = writer.get_extra_info("peername")
        peer = peername[0] if isinstance(peername, tuple) else "unknown"
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            except asyncio.IncompleteReadError:
                return  # the client closed the connection
            except TimeoutError:
                if not len(getattr(reader, "_buffer", b"")):
                    return  # an idle kept-alive connection: closed without a word
                await self._send(
                    writer, 408, error_body("timeout", "request head not sent in time"), close=True
                )
                return
            except (asyncio.LimitOverrunError, ValueError):
                await self._send(
                    writer,
                    431,
                    error_body("head_too_large", f"request head over {MAX_HEAD_BYTES} bytes"),
                    close=True,
                )
                return
            try:
                request = _parse_head(head, peer)
            except HttpError as exc:
                await self._send(writer, exc.status, exc.body, close=True)
                return
            close = _wants_close(request)
            try:
                await self._read_body(request, reader, writer)
            except HttpError as exc:
                await self._send(writer, exc.status, exc.body, close=True)
                return
            status, body, headers = await self._dispatch(request)
            await self._send(writer, status, body, headers, close=close)
            if close:
                return

    async def _read_body(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if "transfer-encoding" in request.headers:
            raise HttpError(411, "length_required", "send the body with Content-Length")
        text = request.headers.get("content-length")
        if text is None:
            return
        if not text.isdigit() or len(text) > 12:
            raise HttpError(400, "bad_request", "bad Content-Length")
        length = int(text)
        if length > self.max_body:
            if length <= DRAIN_MAX_BYTES and "100-continue" not in request.headers.get(
                "expect", ""
            ):
                # Read (and drop) a body of a bounded size first, so that the client, still
                # sending it, gets to read the answer rather than a reset connection.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.readexactly(length), self.timeout)
            raise HttpError(413, "body_too_large", f"body over {self.max_body} bytes")
        if length == 0:
            return
        if request.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            request.body = await asyncio.wait_for(reader.readexactly(length), self.timeout)
        except TimeoutError:
            raise HttpError(408, "timeout", "request body not sent in time") from None

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        if isinstance(body, bytes):
            payload = body
            ctype = (headers or {}).pop("Content-Type", "application/octet-stream")
        else:
            payload = json.dumps(body, separators=(",", ":")).encode() + b"\n"
            ctype = "application/json"
        lines = [
            f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
            f"Content-Type: {ctype}",
            f"Content-Length: {len(payload)}",
            f"Connection: {'close' if close else 'keep-alive'}",
        ]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()

    async def _dispatch(self, request: Request) -> Response:
        try:
            return await self.route(request)
        except HttpError as exc:
            return exc.status, exc.body, exc.headers
        except Exception as exc:
            log.exception("HTTP %s %s failed", request.method, request.path)
            return 500, error_body("internal", f"{type(exc).__name__}"), {}


def _setting(values: Mapping[str, str], key: str, low: int) -> int:
    try:
        value = int(str(values[key]).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {values[key]!r}") from None
    if value < low:
        raise ValueError(f"{key} must be at least {low}, got {value}")
    return value


def error_body(error: str, message: str) -> dict[str, str]:
    return {"error": error, "message": message}


def _parse_head(head: bytes, peer: str) -> Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        raise HttpError(400, "bad_request", "undecodable request head") from None
    lines = text[:-4].split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise HttpError(400, "bad_request", "malformed request line")
    if len(lines) - 1 > MAX_HEADER_LINES:
        raise HttpError(431, "head_too_large", f"over {MAX_HEADER_LINES} header lines")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "bad_request", "malformed header line")
        headers[name.lower()] = value.strip()
    request = Request(parts[0], parts[1], headers, peer)
    request.headers["_version"] = parts[2]
    return request


def _wants_close(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.headers.get("_version") == "HTTP/1.0":
        return connection != "keep-alive"
    return connection == "close"


def allow(request: Request, *methods: str) -> None:
    if request.method not in methods:
        err = HttpError(405, "method_not_allowed", f"{request.method} not allowed here")
        err.headers["Allow"] = ", ".join(methods)
        raise err


def query_params(text: str) -> dict[str, str]:
    try:
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=False, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "bad_request", "malformed query string") from None
    return {k: v[-1] for k, v in parsed.items()}
