"""A minimal Kafka protocol client over a plain socket, for malformed-input tests.

It encodes requests with kio and reads back raw response frames.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from chronik.protocol import legacy


def encode_request(request: Any, correlation_id: int = 1, client_id: str = "raw") -> bytes:
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    header = struct.pack(">hhi", request.__api_key__, request.__version__, correlation_id)
    cid = client_id.encode()
    header += struct.pack(">h", len(cid)) + cid
    if request.__flexible__:
        header += b"\x00"
    payload = header + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next response frame, or None if the broker closed the connection."""
        head = self._read_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < n:
            try:
                chunk = self.sock.recv(n - len(chunks))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def request(self, request: Any, correlation_id: int = 1) -> Any:
        self.send_bytes(encode_request(request, correlation_id))
        frame = self.read_frame()
        assert frame is not None, "broker closed the connection"
        (got_id,) = struct.unpack_from(">i", frame, 0)
        assert got_id == correlation_id
        offset = 4
        flexible = request.__flexible__ and request.__api_key__ != 18
        if flexible:
            offset += 1  # empty tagged fields of response header v1
        cls = legacy.response_class(request.__api_key__, request.__version__)
        if cls is None:
            cls = load_response_schema(request.__api_key__, request.__version__)
        response, _ = entity_reader(cls)(frame, offset)
        return response

    def is_closed(self, timeout: float = 5) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
