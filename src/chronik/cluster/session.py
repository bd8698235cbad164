"""The broker's ZooKeeper session (kazoo), bridged to the event loop.

kazoo is threaded: its calls block and its watches fire on its own thread. Blocking
calls run on a small thread pool of their own and are awaited; watch callbacks and
session state changes are handed to the loop with call_soon_threadsafe, so everything
that changes broker state happens on the loop, in the order ZooKeeper reported it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from chronik.protocol import errors
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.cluster")
T = TypeVar("T")
_UNREACHABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError)


class ZooKeeperUnavailable(StorageError):
    """ZooKeeper did not answer: the request that needed it timed out (the client may
    retry). Raised at once while the session is disconnected, since kazoo would otherwise
    hold the call until ZooKeeper is back."""

    code = errors.REQUEST_TIMED_OUT


def split_connect(connect: str) -> tuple[str, str]:
    """zookeeper.connect is HOST:PORT[,HOST:PORT...][/chroot]."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


class ZkSession:
    def __init__(
        self,
        connect: str,
        session_timeout_ms: int,
        connection_timeout_ms: int,
    ) -> None:
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout = session_timeout_ms / 1000
        self.connection_timeout = connection_timeout_ms / 1000
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="zookeeper")
        self.client: KazooClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._on_state: list[Callable[[str], None]] = []
        # kazoo logs every dropped connection at INFO; the session's own lines say more.
        logging.getLogger("kazoo").setLevel(logging.WARNING)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.run(self._connect)

    def _connect(self) -> None:
        if self.chroot:
            # kazoo does not create the chroot; Kafka's brokers do.
            root = KazooClient(hosts=self.hosts, timeout=self.session_timeout)
            root.start(timeout=self.connection_timeout)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
        client = KazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout)
        client.add_listener(self._state_listener)
        client.start(timeout=self.connection_timeout)
        self.client = client

    def _state_listener(self, state: str) -> None:
        if self.loop is None:
            return
        for callback in self._on_state:
            self.loop.call_soon_threadsafe(callback, state)

    def on_state(self, callback: Callable[[str], None]) -> None:
        """``callback(state)`` on the loop for each of kazoo's LOST, SUSPENDED, CONNECTED."""
        self._on_state.append(callback)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the session's threads. Fails with ZooKeeperUnavailable
        when disconnected, or when no answer comes within the session timeout (the call
        may still be carried out once ZooKeeper is back, as with Kafka's own timeouts)."""
        client = self.client
        if client is not None and not client.connected:
            raise ZooKeeperUnavailable(f"not connected to ZooKeeper at {self.hosts}")
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs)),
                max(self.session_timeout, self.connection_timeout) if client else None,
            )
        except TimeoutError:
            raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} did not answer") from None
        except _UNREACHABLE as exc:
            raise ZooKeeperUnavailable(
                f"ZooKeeper at {self.hosts}: {type(exc).__name__}"
            ) from None

    def to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """From a kazoo thread: run ``fn(*args)`` on the loop."""
        assert self.loop is not None
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    @property
    def session_id(self) -> int | None:
        client = self.client
        if client is None or client.client_id is None:
            return None
        return int(client.client_id[0])

    async def stop(self) -> None:
        client = self.client
        if client is not None:
            await self.run(client.stop)
            await self.run(client.close)
        self._pool.shutdown(wait=False)


__all__ = ["KazooState", "ZkSession", "ZooKeeperUnavailable", "split_connect"]
