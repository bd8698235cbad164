"""A broker's own Kafka client for talking to other brokers: a follower's Fetch and
OffsetForLeaderEpoch requests to a partition's leader.

Wire format: Kafka's framing (int32 size, then request header v1 or v2 for flexible
versions: int16 api_key, int16 api_version, int32 correlation_id, string client_id,
[tagged fields]) around bodies kio encodes from Kafka's own message schemas; responses
are int32 size, int32 correlation_id, [tagged fields when flexible], body. One request is
in flight at a time: a fetcher sends its next request only after the last answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from kio.index import load_payload_module, load_response_schema
from kio.static.constants import EntityType

from chronik.protocol.compat import decode, encode

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
# Answers larger than this are refused (replica.fetch.response.max.bytes plus room for
# the first batch that may exceed it, KIP-74).
MAX_RESPONSE_BYTES = 1 << 30


class BrokerUnreachable(Exception):
    """The other broker cannot be reached, or its connection broke."""


def request_module(api_key: int, version: int) -> Any:
    return load_payload_module(api_key, version, EntityType.request)


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, connect_timeout: float = 5.0):
        self.host = host
        self.port = port
        self._client_id = client_id.encode()
        self._connect_timeout = connect_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self._connect_timeout
            )
        except (OSError, TimeoutError) as exc:
            raise BrokerUnreachable(f"{self.host}:{self.port}: {exc or 'timed out'}") from None

    async def request(self, entity: Any, timeout: float, raw: bool = False) -> Any:
        """Send one request and return its decoded response (with ``raw``, the
        response body's bytes after its header)."""
        async with self._lock:
            if self._writer is None:
                await self._connect()
            assert self._reader is not None and self._writer is not None
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            correlation = self._correlation
            header = _HEADER.pack(
                entity.__api_key__, entity.__version__, correlation, len(self._client_id)
            ) + self._client_id
            if entity.__flexible__:
                header += b"\x00"
            body = header + encode(entity)
            try:
                self._writer.write(_SIZE.pack(len(body)) + body)
                frame = await asyncio.wait_for(self._read_frame(), timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, BrokerUnreachable) as exc:
                self.close()
                raise BrokerUnreachable(
                    f"{self.host}:{self.port}: {type(exc).__name__} {exc}".rstrip()
                ) from None
            (got,) = _SIZE.unpack_from(frame, 0)
            if got != correlation:
                self.close()
                raise BrokerUnreachable(f"{self.host}:{self.port}: answer out of order")
            offset = 5 if entity.__flexible__ else 4
            if raw:
                return frame[offset:]
            cls = load_response_schema(entity.__api_key__, entity.__version__)
            response, _ = decode(cls, frame, offset)
            return response

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
