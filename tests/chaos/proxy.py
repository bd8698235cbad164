"""A TCP proxy that delays what it forwards: the harness's latency fault, since this
kernel has no `tc netem`.

    python -m chaos.proxy LISTEN_HOST:PORT TARGET_HOST:PORT CONTROL_FILE

Every chunk read from one side is written to the other ``delay`` seconds after it was
read, in order, so a connection keeps its byte stream and only gains latency (each
direction by the same amount). The delay is a number of seconds in CONTROL_FILE, read
again every 0.1 s; a missing or unreadable file means no delay. The proxy runs inside a
node's namespace (it is started with that node's exec prefix) and lives until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

CHUNK = 65536


class Delay:
    def __init__(self, control: Path) -> None:
        self.control = control
        self.seconds = 0.0

    async def follow(self) -> None:
        while True:
            try:
                self.seconds = max(float(self.control.read_text().strip() or 0), 0.0)
            except (OSError, ValueError):
                self.seconds = 0.0
            await asyncio.sleep(0.1)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(CHUNK)
            await queue.put((time.monotonic() + delay.seconds, data))
            if not data:
                break
        await sender
    except (OSError, asyncio.IncompleteReadError):
        sender.cancel()
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def main(listen: str, target: str, control: str) -> None:
    delay = Delay(Path(control))
    asyncio.create_task(delay.follow())
    target_host, target_port = target.rsplit(":", 1)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            pipe(reader, up_writer, delay), pipe(up_reader, writer, delay),
            return_exceptions=True,
        )

    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(on_client, host, int(port))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
