"""The event store's HTTP API (``chronik serve --http-listen HOST:PORT``, or the broker
setting ``http.listen``): one aggregate's events read by key, and appended with an
expected version, as JSON over HTTP/1.1 with keep-alive. The description is
chronik/broker/eventstore-openapi.yaml (docs/eventstore-openapi.yaml), served at
GET /v1/openapi.yaml.

  GET  /v1/topics/{topic}/keys/{key}                    {"partition", "version_count"}
  GET  /v1/topics/{topic}/keys/{key}/events?from_version=0&limit=100
  POST /v1/topics/{topic}/keys/{key}/events             If-Match: "<expected version>"

Keys in the path are percent-encoded UTF-8 (``?key_encoding=base64`` for binary keys).
A read costs what the key's own events cost: the partition's key index
(chronik.storage.key_index) gives their offsets, chronik.storage.key_reads reads them. An
append builds one record batch (the first record carries chronik-expected-version) and
appends it as Produce does, answering once it is durable as acks=all is.

The partition of a key: the one whose index already has the key, else Kafka's default
partitioner for keyed records (chronik.records.partitioner). In a cluster, a partition
another broker leads is answered 421 with that broker's id; one without a live leader
(or not yet served by the broker named leader) 503 leader_not_available.

Security: with an authorizer or a SASL listener, every request needs HTTP Basic
credentials, checked against the SCRAM credential store as SASL PLAIN checks them
(principal User:NAME), and ACLs as Fetch (READ on the topic) and Produce (WRITE) need.

Limits (broker settings): http.max.connections (256; more are answered 503 and closed),
http.max.body.bytes (1 MiB; 413), http.request.timeout.ms (30 s to send a request head
or body, and the most a kept-alive connection may idle), a request head of at most
16 KiB (431) and 100 header lines, at most 1000 events per read page or append.
Bad input gets a 4xx status and a JSON error, never a crash.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import time
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, unquote_to_bytes

from chronik.broker.topics import data_partition, partition_count
from chronik.protocol import errors
from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.records.partitioner import partition_for_key
from chronik.records.recompress import recompress, target_codec
from chronik.records.versions import EXPECTED_HEADER, VersionError
from chronik.security.acls import Operation, ResourceType
from chronik.security.sasl import AuthenticationFailed, PlainServer
from chronik.storage.key_reads import read_records
from chronik.storage.partition_writer import AppendOrigin

if TYPE_CHECKING:
    from chronik.broker.server import Broker

log = logging.getLogger("chronik.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADER_LINES = 100
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_EVENTS = 1000
DRAIN_MAX_BYTES = 8 * 1024 * 1024
DURABLE_TIMEOUT_S = 30.0
AUTH_CACHE_SECONDS = 60.0
AUTH_CACHE_SIZE = 1024
OPENAPI = "eventstore-openapi.yaml"

DEFAULTS = {
    "http.max.connections": "256",
    "http.max.body.bytes": str(1024 * 1024),
    "http.request.timeout.ms": "30000",
}

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
    421: "Misdirected Request",
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


class HttpApi:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        values = {**DEFAULTS, **broker.config.values}
        self.max_connections = _setting(values, "http.max.connections", 1)
        self.max_body = _setting(values, "http.max.body.bytes", 1)
        self.timeout = _setting(values, "http.request.timeout.ms", 1) / 1000
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._auth_cache: dict[tuple[str, bytes], tuple[float, str]] = {}
        self._openapi: bytes | None = None

    @property
    def secured(self) -> bool:
        """Whether requests need credentials: the broker has an authorizer or SASL."""
        broker = self.broker
        return broker.authorizer.enabled or any(s.sasl for s in broker.security.listeners)

    async def serve(self, listen: str) -> int:
        host, port, tls = parse_listen(listen)
        ssl_context = None
        if tls:
            ssl_context = self.broker.security.tls
            if ssl_context is None:
                raise ValueError(
                    "https:// in http.listen needs the broker's TLS key store "
                    "(a listener with SSL and ssl.keystore.location)"
                )
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=MAX_HEAD_BYTES, reuse_address=True, ssl=ssl_context
        )
        bound = self._server.sockets[0].getsockname()[1]
        scheme = "https" if tls else "http"
        log.info("event store HTTP API on %s://%s:%d/v1/", scheme, host, bound)
        return bound

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

    # -- connections ----------------------------------------------------------------------
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
                    writer, 408, _err("timeout", "request head not sent in time"), close=True
                )
                return
            except (asyncio.LimitOverrunError, ValueError):
                await self._send(
                    writer,
                    431,
                    _err("head_too_large", f"request head over {MAX_HEAD_BYTES} bytes"),
                    close=True,
                )
                return
            try:
                request = _parse_head(head, peer)
            except HttpError as exc:
                await self._send(writer, exc.status, exc.body, close=True)
                return
            close = _wants_close(head, request)
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

    # -- requests -------------------------------------------------------------------------
    async def _dispatch(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        try:
            return await self._route(request)
        except HttpError as exc:
            return exc.status, exc.body, exc.headers
        except Exception as exc:
            log.exception("HTTP %s %s failed", request.method, request.path)
            return 500, _err("internal", f"{type(exc).__name__}"), {}

    async def _route(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        parts = request.path.split("/")
        if parts[:2] != ["", "v1"]:
            raise HttpError(404, "not_found", "no such resource: the API is under /v1/")
        rest = parts[2:]
        if rest == ["openapi.yaml"]:
            _allow(request, "GET")
            return 200, self._openapi_bytes(), {"Content-Type": "application/yaml"}
        if len(rest) not in (4, 5) or rest[0] != "topics" or rest[2] != "keys":
            raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")
        if len(rest) == 5 and rest[4] != "events":
            raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")
        query = _query(request.query)
        topic = unquote(rest[1], errors="strict")
        key = _key(rest[3], query.get("key_encoding", "utf-8"))
        if not topic:
            raise HttpError(400, "bad_request", "empty topic name")
        if len(rest) == 4:
            _allow(request, "GET")
            principal = await self._principal(request)
            return self._probe(request, principal, topic, key)
        _allow(request, "GET", "POST")
        principal = await self._principal(request)
        if request.method == "GET":
            return self._read(request, principal, topic, key, query)
        return await self._append(request, principal, topic, key)

    def _openapi_bytes(self) -> bytes:
        if self._openapi is None:
            self._openapi = (resources.files("chronik.broker") / OPENAPI).read_bytes()
        return self._openapi

    async def _principal(self, request: Request) -> str | None:
        """The request's principal (User:NAME), None when no credentials are needed;
        raises 401 when they are needed and missing or wrong."""
        if not self.secured:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        user = password = None
        if scheme.lower() == "basic":
            try:
                user, sep, password = (
                    base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
                )
                if not sep:
                    user = None
            except (binascii.Error, UnicodeDecodeError):
                user = None
        if not user or not password:
            err = HttpError(401, "unauthorized", "HTTP Basic credentials required")
            err.headers["WWW-Authenticate"] = 'Basic realm="chronik", charset="UTF-8"'
            raise err
        store = self.broker.security.store
        # A password checked recently for the same stored credential is not run through
        # PBKDF2 again; a changed or deleted credential misses the cache.
        fingerprint = repr(sorted(store.mechanisms(user).items()))
        digest = hashlib.sha256(password.encode()).digest()
        cached = self._auth_cache.get((user, digest))
        now = time.monotonic()
        if cached is not None and cached[0] > now and cached[1] == fingerprint:
            return f"User:{user}"
        try:
            await PlainServer(store).step(b"\0" + user.encode() + b"\0" + password.encode())
        except AuthenticationFailed:
            await self.broker.security.http_authentication_failed(request.peer, user)
            err = HttpError(401, "unauthorized", "invalid credentials")
            err.headers["WWW-Authenticate"] = 'Basic realm="chronik", charset="UTF-8"'
            raise err from None
        if len(self._auth_cache) >= AUTH_CACHE_SIZE:
            self._auth_cache.clear()
        self._auth_cache[(user, digest)] = (now + AUTH_CACHE_SECONDS, fingerprint)
        return f"User:{user}"

    def _authorize(
        self, request: Request, principal: str | None, operation: Operation, topic: str
    ) -> None:
        if principal is None:
            return
        if not self.broker.authorizer.authorize(
            principal, request.peer, operation, ResourceType.TOPIC, topic
        ):
            raise HttpError(
                403,
                "forbidden",
                f"{principal} may not {operation.name} topic {topic!r}",
            )

    def _locate(self, topic: str, key: bytes) -> tuple[Any, int, Any]:
        """(topic, partition, log) of a key on an opted-in topic; raises 404, 409, 421, 503."""
        broker = self.broker
        count = partition_count(broker, topic)
        local = broker.catalog.get(topic)
        if count is None or count < 1:
            raise HttpError(404, "unknown_topic", f"no topic {topic!r}")
        if local is not None and not local.log_config.key_versioning:
            raise HttpError(
                409,
                "versioning_disabled",
                f"topic {topic!r} does not have key.versioning.enable=true",
            )
        index = None
        if local is not None:
            for i, plog in enumerate(local.partitions):
                kidx = getattr(plog, "key_index", None)
                if kidx is not None and kidx.version_count(key) > 0:
                    index = i
                    break
        if index is None:
            index = partition_for_key(key, count)
        plog, code = data_partition(broker, local, topic, index)
        if plog is None:
            if code == errors.NOT_LEADER_OR_FOLLOWER and broker.cluster is not None:
                leader = broker.cluster.leader_of(topic, index)
                if leader < 0 or leader == broker.cluster.node_id:
                    # No live leader (its replicas down, an election under way), or this
                    # broker is named leader but does not serve the partition yet: there is
                    # nobody to send the client to; it may try again.
                    raise HttpError(
                        503,
                        "leader_not_available",
                        f"partition {index} of {topic!r} has no leader available",
                        partition=index,
                    )
                raise HttpError(
                    421,
                    "not_leader",
                    f"partition {index} of {topic!r} is led by broker {leader}",
                    partition=index,
                    leader=leader,
                )
            raise HttpError(404, "unknown_topic", f"no partition {index} of {topic!r}")
        if local is None:
            local = broker.catalog.get(topic)
        if local is None or not local.log_config.key_versioning:
            raise HttpError(
                409,
                "versioning_disabled",
                f"topic {topic!r} does not have key.versioning.enable=true",
            )
        if plog.key_index is None:
            raise HttpError(
                503, "index_unavailable", f"the key index of {topic}-{index} is not open"
            )
        return local, index, plog

    def _probe(
        self, request: Request, principal: str | None, topic: str, key: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        self._authorize(request, principal, Operation.READ, topic)
        _, index, plog = self._locate(topic, key)
        count = plog.key_index.version_count(key)
        body = {"topic": topic, "key": _text(key)[0], "partition": index, "version_count": count}
        return 200, body, {"ETag": f'"{count}"'}

    def _read(
        self,
        request: Request,
        principal: str | None,
        topic: str,
        key: bytes,
        query: dict[str, str],
    ) -> tuple[int, Any, dict[str, str]]:
        self._authorize(request, principal, Operation.READ, topic)
        from_version = _int_param(query, "from_version", 0, 0, 2**62)
        limit = _int_param(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        _, index, plog = self._locate(topic, key)
        kidx = plog.key_index
        count = kidx.version_count(key)
        rows = kidx.events(key, from_version, limit)
        visible = plog.high_watermark
        shown = [(v, o) for v, o in rows if o < visible]
        records = {r.offset: r for r in read_records(plog, (o for _, o in shown))}
        events = []
        for version, offset in shown:
            record = records.get(offset)
            if record is None or record.key != key:
                continue
            events.append(_event(version, index, record))
        next_version = None
        if len(rows) == limit and len(shown) == len(rows):
            next_version = rows[-1][0] + 1
        key_text, key_encoding = _text(key)
        body = {
            "topic": topic,
            "key": key_text,
            "key_encoding": key_encoding,
            "partition": index,
            "version_count": count,
            "events": events,
            "next_version": next_version,
        }
        return 200, body, {"ETag": f'"{count}"'}

    async def _append(
        self, request: Request, principal: str | None, topic: str, key: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        self._authorize(request, principal, Operation.WRITE, topic)
        expected, must_exist = _precondition(request.headers)
        values = _events(request.body)
        local, index, plog = self._locate(topic, key)
        broker = self.broker
        writer = broker.writer
        refused = writer.refusal(topic, index, AppendOrigin.HTTP)
        if refused is not None:
            raise HttpError(503, "not_enough_replicas", str(refused[1]))
        now = broker.now_ms()
        records = []
        for i, (value, headers) in enumerate(values):
            if i == 0 and expected is not None:
                headers = ((EXPECTED_HEADER, str(expected).encode()), *headers)
            records.append(Record(now, key, value, headers))
        batch = bytearray(build_batch(records))
        header = read_header(batch)
        if header.size > local.log_config.max_message_bytes:
            raise HttpError(
                413,
                "batch_too_large",
                f"the events make a batch of {header.size} bytes, over the topic's "
                f"max.message.bytes {local.log_config.max_message_bytes}",
            )
        codec = target_codec(local.log_config.compression_type)
        if codec is not None and codec != header.compression:
            batch, header = recompress(batch, header, codec)
        # Nothing awaits from here to the append: the version read is the one checked.
        kidx = plog.key_index
        before = kidx.version_count(key)
        if must_exist and before == 0:
            raise HttpError(
                412,
                "version_conflict",
                "the key has no events",
                key=_text(key)[0],
                expected=None,
                actual=0,
            )
        try:
            result = writer.append(plog, topic, batch, header, now, AppendOrigin.HTTP)
        except VersionError:
            actual = plog.key_index.version_count(key) if plog.key_index is not None else before
            raise HttpError(
                412,
                "version_conflict",
                f"version conflict on key {_text(key)[0]!r}: expected {expected}, actual {actual}",
                key=_text(key)[0],
                expected=expected,
                actual=actual,
            ) from None
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            status = 503 if code == errors.KAFKA_STORAGE_ERROR else 400
            raise HttpError(status, "append_failed", str(exc), kafka_error=code) from None
        try:
            code, message = await writer.durable(
                plog, topic, index, result.last_offset, DURABLE_TIMEOUT_S
            )
            if code != errors.NONE:
                raise HttpError(503, "not_replicated", str(message), kafka_error=code)
        except HttpError:
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            raise HttpError(503, "not_durable", str(exc), kafka_error=code) from None
        n = len(records)
        body = {
            "topic": topic,
            "key": _text(key)[0],
            "partition": index,
            "first_version": before,
            "versions": list(range(before, before + n)),
            "offsets": list(range(result.base_offset, result.base_offset + n)),
        }
        return 201, body, {"ETag": f'"{before + n}"'}


# -- helpers --------------------------------------------------------------------------------
def _setting(values: dict[str, str], key: str, low: int) -> int:
    try:
        value = int(str(values[key]).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {values[key]!r}") from None
    if value < low:
        raise ValueError(f"{key} must be at least {low}, got {value}")
    return value


def _err(error: str, message: str) -> dict[str, str]:
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


def _wants_close(head: bytes, request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.headers.get("_version") == "HTTP/1.0":
        return connection != "keep-alive"
    return connection == "close"


def _allow(request: Request, *methods: str) -> None:
    if request.method not in methods:
        err = HttpError(405, "method_not_allowed", f"{request.method} not allowed here")
        err.headers["Allow"] = ", ".join(methods)
        raise err


def _query(text: str) -> dict[str, str]:
    try:
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=False, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise HttpError(400, "bad_request", "malformed query string") from None
    return {k: v[-1] for k, v in parsed.items()}


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 19:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    return value


def _key(segment: str, encoding: str) -> bytes:
    raw = unquote_to_bytes(segment)
    if encoding == "utf-8":
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(
                400, "bad_request", "the key is not UTF-8: use key_encoding=base64"
            ) from None
    elif encoding == "base64":
        raw = _b64(raw.decode("latin-1"), "key")
    else:
        raise HttpError(400, "bad_request", "key_encoding must be utf-8 or base64")
    if not raw:
        raise HttpError(400, "bad_request", "empty key")
    return raw


def _b64(text: str, what: str) -> bytes:
    text = text.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(400, "bad_request", f"{what} is not valid base64") from None


def _text(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 text when the bytes decode, else base64."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _event(version: int, partition: int, record: Any) -> dict[str, Any]:
    key_text, key_encoding = _text(record.key)
    if record.value is None:
        value, value_encoding = None, None
    else:
        value, value_encoding = _text(record.value)
    headers = []
    for name, hvalue in record.headers:
        if hvalue is None:
            headers.append({"key": name, "value": None, "value_encoding": None})
        else:
            text, enc = _text(hvalue)
            headers.append({"key": name, "value": text, "value_encoding": enc})
    return {
        "version": version,
        "offset": record.offset,
        "partition": partition,
        "timestamp": record.timestamp,
        "key": key_text,
        "key_encoding": key_encoding,
        "value": value,
        "value_encoding": value_encoding,
        "headers": headers,
    }


def _precondition(headers: dict[str, str]) -> tuple[int | None, bool]:
    """(expected version, must exist) from If-Match / If-None-Match."""
    if_match = headers.get("if-match")
    if_none = headers.get("if-none-match")
    if if_match is not None and if_none is not None:
        raise HttpError(400, "bad_request", "send If-Match or If-None-Match, not both")
    if if_none is not None:
        if if_none.strip() != "*":
            raise HttpError(400, "bad_request", 'If-None-Match takes only "*" here')
        return 0, False
    if if_match is None:
        return None, False
    text = if_match.strip()
    if text == "*":
        return None, True
    if text.startswith("W/"):
        text = text[2:]
    text = text.strip('"')
    if not text.isdigit() or len(text) > 18:
        raise HttpError(400, "bad_request", 'If-Match must be "<version count>", e.g. "3"')
    return int(text), False


def _events(body: bytes) -> list[tuple[bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    """The (value, headers) of each event of an append's JSON body."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise HttpError(400, "bad_request", "the body is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise HttpError(400, "bad_request", 'the body must be {"events": [...]}')
    items = doc["events"]
    if not items:
        raise HttpError(400, "bad_request", "no events")
    if len(items) > MAX_EVENTS:
        raise HttpError(400, "bad_request", f"at most {MAX_EVENTS} events per append")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "value" not in item:
            raise HttpError(400, "bad_request", f'event {i} must be an object with "value"')
        out.append((_value(item, f"event {i}"), _headers(item.get("headers"), i)))
    return out


def _value(item: dict[str, Any], what: str) -> bytes | None:
    value = item.get("value")
    encoding = item.get("value_encoding") or "utf-8"
    if encoding not in ("utf-8", "base64"):
        raise HttpError(400, "bad_request", f"{what}: value_encoding must be utf-8 or base64")
    if value is None:
        return None
    if not isinstance(value, str):
        if encoding == "base64":
            raise HttpError(400, "bad_request", f"{what}: a base64 value must be a string")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if encoding == "base64":
        return _b64(value, f"{what}'s value")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise HttpError(400, "bad_request", f"{what}: the value is not valid UTF-8") from None


def _headers(raw: Any, i: int) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    pairs: list[tuple[str, dict[str, Any]]] = []
    if isinstance(raw, dict):
        for name, value in raw.items():
            if value is not None and not isinstance(value, str):
                raise HttpError(400, "bad_request", f"event {i}: header values must be strings")
            pairs.append((name, {"value": value}))
    elif isinstance(raw, list):
        for h in raw:
            if not isinstance(h, dict) or not isinstance(h.get("key"), str):
                raise HttpError(
                    400,
                    "bad_request",
                    f'event {i}: headers must be {{"name": "value"}} '
                    'or [{"key", "value", "value_encoding"}]',
                )
            if h.get("value") is not None and not isinstance(h.get("value"), str):
                raise HttpError(400, "bad_request", f"event {i}: header values must be strings")
            pairs.append((h["key"], h))
    else:
        raise HttpError(400, "bad_request", f"event {i}: headers must be an object or a list")
    out = []
    for name, h in pairs:
        if name.lower().startswith("chronik-"):
            raise HttpError(
                400, "bad_request", f"event {i}: chronik-* headers are the broker's (use If-Match)"
            )
        out.append((name, _value(h, f"event {i} header {name!r}")))
    return tuple(out)
