"""The reading end of a TLS connection: asyncio's SSL layer decrypts into our buffers.

asyncio's SSL layer hands a plain Protocol each read as a new bytes object, which a
StreamReader copies into its buffer, from which the connection copies a request body out
in pieces and joins them: four passes over every byte, and two large allocations per
request, after the decryption. With a BufferedProtocol the SSL layer decrypts into the
buffer the protocol names: here a reused scratch buffer while headers are read (its
bytes go to the StreamReader as before), and the request's own buffer while a body is
read (``read_body``), so a body's bytes are written once, by OpenSSL. While a body is
read the socket wakes the event loop only once a large piece of it has arrived (WAKE_AT).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

# Plaintext handed over at a time while no body is being read: headers and small
# requests. Kept small, as it is held per connection (asyncio's SSL layer reads 256 KiB of
# ciphertext from the socket at a time, and decrypts it in as many turns as it needs).
SCRATCH = 2**16
# While a body is read, the socket wakes the event loop only once this much ciphertext has
# arrived (SO_RCVLOWAT), or less when less of the body is left. A client writes TLS records
# of up to 16 KiB one write() at a time (librdkafka does), and each woke the loop for a
# read of one or two records: an event-loop turn, a recv, a pass through the SSL layer per
# record, where a plaintext body arrives in one write. The SSL layer reads 256 KiB at a time.
WAKE_AT = 2**18
# Plaintext that ciphertext already taken from the socket may still yield: while the body
# has room, the SSL layer decrypts all it can into it before it reads the socket again, so
# at most one partial record (16 KiB of plaintext) waits in its buffer.
IN_SSL_LAYER = 2**14 + 2**9
# Below this the mark is not set: a small body costs no system calls.
WAKE_MIN = 2**16
# A mark is held at most this long without a wake-up, then dropped for one turn: TLS
# messages that are not application data and want an answer (a TLS 1.2 renegotiation,
# refused with an alert; a close_notify from a client that waits for ours) are a few
# hundred bytes and would not reach it. A body that trickles in is also seen arriving.
WAKE_WAIT = 0.05


class TLSStreamReader(asyncio.StreamReader):
    """A StreamReader that can also take a request body straight from the decryption."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit=limit)
        self._scratch = memoryview(bytearray(SCRATCH))
        self._body: memoryview | None = None
        self._filled = 0
        # Whether the last buffer handed out was the body's.
        self._into_body = False
        # The socket's SO_RCVLOWAT as last set (1: the kernel's default).
        self._wake_at = 1

    def buffer(self) -> memoryview:
        """Where the next decrypted bytes go. Never an empty buffer: the SSL layer takes
        a read of nothing for the peer's close_notify."""
        body = self._body
        self._into_body = body is not None and self._filled < len(body)
        if self._into_body:
            assert body is not None
            return body[self._filled :]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_body:
            self._filled += nbytes
            self._wakeup_waiter()
        else:
            self.feed_data(self._scratch[:nbytes])

    async def read_body(self, size: int, progress: Callable[[], None]) -> bytearray:
        """The next ``size`` bytes; ``progress`` is called whenever some have arrived."""
        body = bytearray(size)
        view = memoryview(body)
        # What the StreamReader holds already comes first.
        taken = min(len(self._buffer), size)
        if taken:
            view[:taken] = self._buffer[:taken]
            del self._buffer[:taken]
            self._maybe_resume_transport()
        self._body, self._filled = view, taken
        try:
            while self._filled < size:
                if self._exception is not None:
                    raise self._exception
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(view[: self._filled]), size)
                # The rest of the body is on its way: wake when most of it, or WAKE_AT, is
                # here. Never more than the body still owes, so the mark is always reached
                # (a peer that closes wakes the loop whatever the mark).
                self._set_wake_at(min(size - self._filled - IN_SSL_LAYER, WAKE_AT))
                if self._wake_at > 1:
                    timer = asyncio.get_running_loop().call_later(
                        WAKE_WAIT, self._set_wake_at, 1
                    )
                    try:
                        await self._wait_for_data("read_body")
                    finally:
                        timer.cancel()
                else:
                    await self._wait_for_data("read_body")
                progress()
        finally:
            self._body = None
            self._set_wake_at(1)
        return body

    def _set_wake_at(self, nbytes: int) -> None:
        if nbytes < WAKE_MIN:
            nbytes = 1
        if nbytes == self._wake_at or self._transport is None:
            return
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return
        with contextlib.suppress(OSError):  # a socket already closed: nothing to wake
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, nbytes)
            self._wake_at = nbytes


class TLSStreamProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A StreamReaderProtocol that asyncio's SSL layer decrypts into (see TLSStreamReader)."""

    def __init__(self, reader: TLSStreamReader) -> None:
        super().__init__(reader)
        self._tls_reader = reader

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._tls_reader.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._tls_reader.buffer_updated(nbytes)
