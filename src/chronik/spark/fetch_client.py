# A blocking Kafka client for one partition's Fetch, for the Spark reader's fast path.
#
# Wire format (big-endian; Kafka's FetchRequest.json / FetchResponse.json at version 11, the
# newest non-flexible version, served by Kafka 2.3 and later and by chronik):
#   request  = int32 size, int16 api_key (1), int16 api_version (11), int32 correlation_id,
#              string client_id, int32 replica_id (-1), int32 max_wait_ms, int32 min_bytes,
#              int32 max_bytes, int8 isolation_level, int32 session_id (0),
#              int32 session_epoch (-1: no fetch session), [topic string,
#              [int32 partition, int32 current_leader_epoch (-1), int64 fetch_offset,
#              int64 log_start_offset (-1), int32 partition_max_bytes]],
#              [forgotten topics] (empty), string rack_id ("")
#   response = int32 size, int32 correlation_id, int32 throttle_time_ms, int16 error_code,
#              int32 session_id, [topic string, [int32 partition, int16 error_code,
#              int64 high_watermark, int64 last_stable_offset, int64 log_start_offset,
#              nullable [int64 producer_id, int64 first_offset] aborted_transactions,
#              int32 preferred_read_replica, nullable bytes records]]
# ApiVersions v0 (int16 error_code, [int16 api_key, int16 min, int16 max]) is asked first, so a
# broker without Fetch v11 is found out before anything is sent that it cannot parse.
#
# The request body and the response are chronik.protocol.replica_fetch's, the codec a
# follower fetches with too. The records come back as a memoryview into the response
# buffer: batches are never copied on their way to the decoder. With isolation_level 1
# (read_committed) the broker answers up to the last stable offset, and the aborted
# transactions of that range.
from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import Mapping

from chronik.protocol import replica_fetch
from chronik.protocol.replica_fetch import FetchPosition, PartitionData
from chronik.spark import fetch_auth

FETCH = 1
API_VERSIONS = 18
FETCH_VERSION = 11

_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ProtocolError(Exception):
    """The broker's answer cannot be read, or it lacks what this client needs."""


class Unsupported(ProtocolError):
    """The broker does not serve Fetch v11: read through librdkafka instead."""


def encode_fetch(
    correlation_id: int,
    client_id: bytes,
    topic: bytes,
    partition: int,
    offset: int,
    max_wait_ms: int,
    max_bytes: int,
    isolation_level: int = 0,
) -> bytes:
    body = b"".join((
        _HEADER.pack(FETCH, FETCH_VERSION, correlation_id, len(client_id)),
        client_id,
        replica_fetch.encode_request(
            -1, max_wait_ms, 1, max_bytes, 0, -1,
            {(topic.decode(), partition): FetchPosition(offset, -1, -1)}, max_bytes,
            isolation_level=isolation_level,
        ),
    ))
    return _I32.pack(len(body)) + body


def decode_fetch(buf: memoryview, topic: bytes, partition: int) -> PartitionData:
    """The one partition of a Fetch v11 response body (after the size prefix); its
    records an empty view when the broker sent none."""
    name = topic.decode()
    try:
        response = replica_fetch.decode_response(buf[4:])  # after the correlation id
        if response.error_code:
            raise ProtocolError(f"fetch failed with error {response.error_code}")
        for part in response.partitions():
            if part.topic == name and part.partition == partition:
                return part if part.records is not None else part._replace(records=buf[:0])
    except ValueError as exc:
        raise ProtocolError(f"unreadable fetch response: {exc}") from None
    raise ProtocolError(f"fetch response without {name}-{partition}")


class FetchConnection:
    """One connection to a partition's leader; requests may be sent ahead of reading."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        timeout_s: float,
        security: Mapping[str, str] | None = None,
    ):
        """``security``: librdkafka's security.protocol, sasl.* and ssl.* settings."""
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            context = fetch_auth.tls_context(security or {})
            self.sock = (
                sock if context is None else context.wrap_socket(sock, server_hostname=host)
            )
        except BaseException:
            sock.close()
            raise
        self.client_id = client_id.encode()
        self._correlation = 0
        self._pending: deque[int] = deque()  # correlation ids sent and not yet answered
        try:
            self._check_versions()
            fetch_auth.authenticate(security or {}, self._request)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def _next_id(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        self._pending.append(self._correlation)
        return self._correlation

    def _check_versions(self) -> None:
        header = _HEADER.pack(API_VERSIONS, 0, self._next_id(), len(self.client_id))
        body = header + self.client_id
        self.sock.sendall(_I32.pack(len(body)) + body)
        buf = self.receive()
        try:
            (error,) = _I16.unpack_from(buf, 4)
            (count,) = _I32.unpack_from(buf, 6)
            ranges = {
                key: (lo, hi)
                for key, lo, hi in struct.iter_unpack(">hhh", buf[10 : 10 + 6 * count])
            }
        except struct.error as exc:
            raise ProtocolError(f"unreadable ApiVersions response: {exc}") from None
        lo, hi = ranges.get(FETCH, (1, 0))
        if error or not lo <= FETCH_VERSION <= hi:
            raise Unsupported(f"broker serves Fetch v{lo}-v{hi}, not v{FETCH_VERSION}")

    def _request(self, api_key: int, version: int, body: bytes) -> memoryview:
        """One request and its response, after the correlation id."""
        header = _HEADER.pack(api_key, version, self._next_id(), len(self.client_id))
        payload = header + self.client_id + body
        self.sock.sendall(_I32.pack(len(payload)) + payload)
        return self.receive()[4:]

    def send_fetch(
        self,
        topic: bytes,
        partition: int,
        offset: int,
        max_wait_ms: int,
        max_bytes: int,
        isolation_level: int = 0,
    ) -> None:
        self.sock.sendall(encode_fetch(
            self._next_id(), self.client_id, topic, partition, offset, max_wait_ms, max_bytes,
            isolation_level,
        ))

    def receive(self) -> memoryview:
        """The next response, correlation id first; responses come in the order asked."""
        head = self._read_exactly(4)
        (size,) = _I32.unpack(head)
        if size < 4:
            raise ProtocolError(f"response of {size} bytes")
        body = self._read_exactly(size)
        (got,) = _I32.unpack_from(body)
        expected = self._pending.popleft() if self._pending else None
        if got != expected:
            raise ProtocolError(f"response to request {got}, expected {expected}")
        return body

    def _read_exactly(self, size: int) -> memoryview:
        return read_exactly(self.sock, size)


def read_exactly(sock: socket.socket, size: int) -> memoryview:
    """``size`` bytes from ``sock`` into one buffer, however the kernel splits them."""
    view = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the broker closed the connection")
        got += n
    return view
