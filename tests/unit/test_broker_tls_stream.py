"""TLSStreamReader: what asyncio's SSL layer decrypts goes to the reader's buffer, or
straight into a request body being read."""

from __future__ import annotations

import asyncio
import socket

import pytest

from chronik.broker.tls_stream import (
    IN_SSL_LAYER,
    SCRATCH,
    WAKE_AT,
    WAKE_WAIT,
    TLSStreamProtocol,
    TLSStreamReader,
)


def deliver(protocol: TLSStreamProtocol, data: bytes) -> None:
    """As the SSL layer does: ask for a buffer, fill what fits, say how much; repeat."""
    while data:
        buffer = protocol.get_buffer(-1)
        assert len(buffer) > 0  # an empty read is taken for the peer's close_notify
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        protocol.buffer_updated(n)
        data = data[n:]


async def reader_and_protocol() -> tuple[TLSStreamReader, TLSStreamProtocol]:
    reader = TLSStreamReader(limit=2**20)
    return reader, TLSStreamProtocol(reader)


def test_headers_and_a_body_split_across_reads() -> None:
    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        body = bytes(range(256)) * 3000
        deliver(protocol, b"\x00\x00\x00\x10" + body[:100])
        assert await reader.readexactly(4) == b"\x00\x00\x00\x10"
        progress: list[int] = []
        task = asyncio.create_task(reader.read_body(len(body), lambda: progress.append(1)))
        await asyncio.sleep(0)
        deliver(protocol, body[100:5000])
        await asyncio.sleep(0)
        deliver(protocol, body[5000:] + b"next")
        assert bytes(await task) == body
        assert progress
        # What came after the body is read as before.
        assert await reader.readexactly(4) == b"next"

    asyncio.run(main())


def test_a_body_already_buffered_is_taken_without_waiting() -> None:
    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        deliver(protocol, b"abcdefgh")
        assert bytes(await reader.read_body(5, lambda: None)) == b"abcde"
        assert await reader.readexactly(3) == b"fgh"

    asyncio.run(main())


def test_a_filled_body_hands_out_the_scratch_buffer_not_an_empty_one() -> None:
    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        task = asyncio.create_task(reader.read_body(10, lambda: None))
        await asyncio.sleep(0)
        buffer = protocol.get_buffer(-1)
        assert len(buffer) == 10
        buffer[:10] = b"0123456789"
        protocol.buffer_updated(10)
        # Before the body's reader has run again, the SSL layer may read on.
        assert len(protocol.get_buffer(-1)) == SCRATCH
        protocol.buffer_updated(0)
        assert bytes(await task) == b"0123456789"

    asyncio.run(main())


def test_a_connection_closed_inside_a_body() -> None:
    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        task = asyncio.create_task(reader.read_body(100, lambda: None))
        await asyncio.sleep(0)
        deliver(protocol, b"x" * 30)
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError) as raised:
            await task
        assert raised.value.partial == b"x" * 30

    asyncio.run(main())


def test_a_connection_error_inside_a_body() -> None:
    async def main() -> None:
        reader, _ = await reader_and_protocol()
        task = asyncio.create_task(reader.read_body(100, lambda: None))
        await asyncio.sleep(0)
        reader.set_exception(ConnectionResetError("reset"))
        with pytest.raises(ConnectionResetError):
            await task

    asyncio.run(main())


class _Transport(asyncio.Transport):
    """What the reader asks of asyncio's SSL transport: the socket beneath it."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.sock if name == "socket" else default


def test_the_wake_up_mark_follows_what_the_body_still_owes() -> None:
    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        ours, theirs = socket.socketpair()
        try:
            reader.set_transport(_Transport(ours))

            def mark() -> int:
                return ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)

            size = 3 * 2**20
            task = asyncio.create_task(reader.read_body(size, lambda: None))
            await asyncio.sleep(0)
            assert mark() == WAKE_AT  # far from the end: a full read's worth
            deliver(protocol, b"x" * (size - 100_000))
            await asyncio.sleep(0)
            # Less than WAKE_AT left: never more than can still come.
            assert mark() == 100_000 - IN_SSL_LAYER
            deliver(protocol, b"x" * (100_000 - 40_000))
            await asyncio.sleep(0)
            assert mark() == 1  # a small rest: no mark, no system call
            deliver(protocol, b"x" * 40_000)
            assert len(await task) == size
            assert mark() == 1  # between bodies (headers, small requests): the default
        finally:
            ours.close()
            theirs.close()

    asyncio.run(main())


def test_a_mark_not_reached_in_time_is_dropped_until_bytes_come() -> None:
    """A few bytes that are not application data (an alert, a renegotiation) must not
    wait behind the mark: after WAKE_WAIT without a wake-up it goes back to 1, and is set
    again once the body moves on."""

    async def main() -> None:
        reader, protocol = await reader_and_protocol()
        ours, theirs = socket.socketpair()
        try:
            reader.set_transport(_Transport(ours))

            def mark() -> int:
                return ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)

            task = asyncio.create_task(reader.read_body(2**21, lambda: None))
            await asyncio.sleep(0)
            assert mark() == WAKE_AT
            await asyncio.sleep(WAKE_WAIT * 3)
            assert mark() == 1
            deliver(protocol, b"x" * 1000)
            await asyncio.sleep(0)
            assert mark() == WAKE_AT
            deliver(protocol, b"x" * (2**21 - 1000))
            assert len(await task) == 2**21
        finally:
            ours.close()
            theirs.close()

    asyncio.run(main())
