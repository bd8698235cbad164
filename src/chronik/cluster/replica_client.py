"""A broker's own Kafka client for talking to other brokers: a follower's Fetch and
OffsetForLeaderEpoch requests to a partition's leader, the transaction coordinator's
WriteTxnMarkers.

With the inter-broker listener's security (chronik.security.broker_security's
ClientSecurity) the connection is TLS (SSL, SASL_SSL) and authenticates right after
connecting with SaslHandshake v1 and SaslAuthenticate (SASL_PLAINTEXT, SASL_SSL), as
Kafka's brokers do. A refused authentication is logged once and raised as
AuthenticationRefused (a BrokerUnreachable, so callers retry as for a broker away); the
client connects again only after RETRY_AFTER_REFUSAL seconds.

Wire format: Kafka's framing (int32 size, then request header v1 or v2 for flexible
versions: int16 api_key, int16 api_version, int32 correlation_id, string client_id,
[tagged fields]) around bodies kio encodes from Kafka's own message schemas; responses
are int32 size, int32 correlation_id, [tagged fields when flexible], body. One request is
in flight at a time: a fetcher sends its next request only after the last answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from functools import cache
from typing import TYPE_CHECKING, Any

from kio.index import load_payload_module, load_response_schema
from kio.static.constants import EntityType

from chronik.protocol.compat import decode, encode
from chronik.security.sasl_client import AuthenticationError, exchange

if TYPE_CHECKING:
    from chronik.security.broker_security import ClientSecurity

log = logging.getLogger("chronik.replication")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
# Answers larger than this are refused (replica.fetch.response.max.bytes plus room for
# the first batch that may exceed it, KIP-74).
MAX_RESPONSE_BYTES = 1 << 30
# What the connection's reader buffers before it stops reading the socket: asyncio's
# 64 KB default paused and resumed the socket (two epoll changes) several times for
# every fetch answer of a few hundred KB.
READ_LIMIT = 1 << 20
# How long a connection's TLS handshake and SASL exchange may take together.
AUTHENTICATION_TIMEOUT = 30.0
# After the other broker refused this one's credentials, no new attempt before this.
RETRY_AFTER_REFUSAL = 5.0


class BrokerUnreachable(Exception):
    """The other broker cannot be reached, or its connection broke."""


class AuthenticationRefused(BrokerUnreachable):
    """The other broker refused this one's SASL credentials (or the exchange failed)."""


# Cached: kio finds a schema module by importing it by name, a module lookup per call
# that a follower's fetch loop would otherwise make every round.
@cache
def request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


@cache
def _response_class(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


class BrokerClient:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        connect_timeout: float = 5.0,
        security: ClientSecurity | None = None,
    ):
        self.host = host
        self.port = port
        self._client_id = client_id.encode()
        self._connect_timeout = connect_timeout
        self._security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()
        self._refused_until = 0.0
        self._refusal = ""

    async def _connect(self) -> None:
        security = self._security
        if time.monotonic() < self._refused_until:
            raise AuthenticationRefused(self._refusal)
        tls = security.tls if security is not None else None
        try:
            # asyncio.timeout, not wait_for: in 3.11 wait_for may drop a cancellation
            # that comes as its operation completes, and a stopping fetcher then runs on.
            async with asyncio.timeout(
                self._connect_timeout if tls is None else AUTHENTICATION_TIMEOUT
            ):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    limit=READ_LIMIT,
                    ssl=tls,
                    server_hostname=self.host if tls is not None else None,
                )
        except ssl.SSLError as exc:
            raise BrokerUnreachable(
                f"{self.host}:{self.port}: TLS handshake failed: {exc.reason or exc}"
            ) from None
        except (OSError, TimeoutError) as exc:
            raise BrokerUnreachable(f"{self.host}:{self.port}: {exc or 'timed out'}") from None
        if security is None or security.credentials is None:
            return
        try:
            async with asyncio.timeout(AUTHENTICATION_TIMEOUT):
                await self._authenticate(security)
        except AuthenticationError as exc:
            self.close()
            self._refusal = (
                f"{self.host}:{self.port} refused authentication as "
                f"{security.credentials.user} with {security.mechanism}: {exc}"
            )
            if not self._refused_until:
                log.warning("broker at %s; trying again in %.0f s", self._refusal,
                            RETRY_AFTER_REFUSAL)
            self._refused_until = time.monotonic() + RETRY_AFTER_REFUSAL
            raise AuthenticationRefused(self._refusal) from None
        except (OSError, TimeoutError, asyncio.IncompleteReadError, BrokerUnreachable) as exc:
            self.close()
            raise BrokerUnreachable(
                f"{self.host}:{self.port}: during authentication: {type(exc).__name__} {exc}"
                .rstrip()
            ) from None
        if self._refused_until:
            log.info("broker at %s:%d took this broker's credentials again", self.host,
                     self.port)
            self._refused_until = 0.0

    async def _authenticate(self, security: ClientSecurity) -> None:
        assert security.mechanism is not None and security.credentials is not None
        steps = exchange(security.mechanism, security.credentials)
        try:
            api_key, version, body = next(steps)
            while True:
                answer = await self._exchange(api_key, version, False, body)
                api_key, version, body = steps.send(answer[4:])
        except StopIteration:
            return

    async def _exchange(self, api_key: int, version: int, flexible: bool, body: bytes) -> bytes:
        """Send one request; its answer's frame (from the correlation id on)."""
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        header = _HEADER.pack(api_key, version, correlation, len(self._client_id))
        header += self._client_id
        if flexible:
            header += b"\x00"
        frame = header + body
        self._writer.write(_SIZE.pack(len(frame)) + frame)
        answer = await self._read_frame()
        (got,) = _SIZE.unpack_from(answer, 0)
        if got != correlation:
            raise BrokerUnreachable("answer out of order")
        return answer

    async def request(self, entity: Any, timeout: float, raw: bool = False) -> Any:
        """Send one request and return its decoded response (with ``raw``, the
        response body's bytes after its header)."""
        flexible = bool(entity.__flexible__)
        body = await self.request_bytes(
            entity.__api_key__, entity.__version__, encode(entity), timeout, flexible
        )
        if raw:
            return body
        cls = _response_class(entity.__api_key__, entity.__version__)
        response, _ = decode(cls, body, 0)
        return response

    async def request_bytes(
        self, api_key: int, version: int, body: bytes, timeout: float, flexible: bool = False
    ) -> bytes:
        """Send one request of ``body`` bytes; its response body's bytes (chronik's own
        APIs, which kio has no schema for, and the raw Fetch)."""
        return bytes(await self.request_view(api_key, version, body, timeout, flexible))

    async def request_view(
        self, api_key: int, version: int, body: bytes, timeout: float, flexible: bool = False
    ) -> memoryview:
        """As request_bytes, the response body as a view of the frame read (a follower's
        Fetch answer, whose record bytes are appended as they are, uncopied)."""
        async with self._lock:
            if self._writer is None:
                await self._connect()
            assert self._reader is not None and self._writer is not None
            try:
                async with asyncio.timeout(timeout):
                    frame = await self._exchange(api_key, version, flexible, body)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, BrokerUnreachable) as exc:
                self.close()
                raise BrokerUnreachable(
                    f"{self.host}:{self.port}: {type(exc).__name__} {exc}".rstrip()
                ) from None
            return memoryview(frame)[5 if flexible else 4 :]

    async def _read_frame(self) -> bytes:
        assert self._reader is not None
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise BrokerUnreachable(f"answer of {size} bytes")
        return await self._reader.readexactly(size)

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
