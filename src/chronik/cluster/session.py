"""The broker's ZooKeeper session (kazoo), bridged to the event loop.

kazoo is threaded: its calls block and its watches fire on its own thread. Blocking
calls run on a few threads of the session's own and are awaited; watch callbacks and
session state changes are handed to the loop with call_soon_threadsafe, so everything
that changes broker state happens on the loop, in the order ZooKeeper reported it.

While ZooKeeper is unreachable kazoo holds a call until it is back, however long that
is. So every thread a call may be waiting on is a daemon thread, and closing the session
waits for ZooKeeper only a moment: a broker stops whatever ZooKeeper does, as Kafka's
broker gives up on its ZooKeeper client at close (the session then expires on its own).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from chronik.protocol import errors
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.cluster")
T = TypeVar("T")
_UNREACHABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError)
# At stop, how long the close of the session may wait for ZooKeeper. Answered, it takes
# milliseconds; unanswered, waiting longer gains nothing, since ZooKeeper expires the
# session after zookeeper.session.timeout.ms anyway.
CLOSE_TIMEOUT_SECONDS = 5.0
# Between two attempts to reach ZooKeeper again. kazoo's default backs off to an hour,
# which would leave a broker away long after ZooKeeper is back; ZooKeeper's own Java
# client (Kafka's) tries again within a second.
RECONNECT_MAX_DELAY_SECONDS = 1.0
WORKERS = 4


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


class _DaemonWorkers:
    """A few daemon threads taking calls in turn. Not a ThreadPoolExecutor: the
    interpreter joins its threads at exit, and one of them waiting on an unreachable
    ZooKeeper would hold the stopped broker's process for as long as ZooKeeper is away."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the session is closed")
            if not self._threads:
                for i in range(self._count):
                    thread = threading.Thread(
                        target=self._work, name=f"{self._name}-{i}", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
            self._calls.put((future, fn))
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                future.set_exception(exc)
            else:
                future.set_result(result)
            del future, fn, item

    def close(self) -> None:
        """Idle workers end; busy ones end when their call returns, or with the process."""
        with self._lock:
            self._closed = True
            for _ in self._threads:
                self._calls.put(None)


def _in_daemon_thread(fn: Callable[[], None], name: str) -> Future[None]:
    future: Future[None] = Future()
    # Running from the start, so that a caller giving up on it cannot cancel it under
    # the thread that is to set its outcome.
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


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
        self._workers = _DaemonWorkers(WORKERS, "zookeeper")
        self.client: KazooClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._on_state: list[Callable[[str], None]] = []
        self._closed = False
        # kazoo logs every dropped connection at INFO, and every failed attempt to connect
        # again at WARNING (one a second while ZooKeeper is away). The broker's own lines
        # say it once: connection lost, session expired, reconnected.
        logging.getLogger("kazoo").setLevel(logging.WARNING)
        logging.getLogger("kazoo.client").setLevel(logging.ERROR)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.run(self._connect)

    def _client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self.session_timeout,
            connection_retry=KazooRetry(
                max_tries=-1, max_delay=RECONNECT_MAX_DELAY_SECONDS
            ),
        )

    def _connect(self) -> None:
        if self.chroot:
            # kazoo does not create the chroot; Kafka's brokers do.
            root = self._client(self.hosts)
            root.start(timeout=self.connection_timeout)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
        client = self._client(self.hosts + self.chroot)
        client.add_listener(self._state_listener)
        client.start(timeout=self.connection_timeout)
        self.client = client

    def _state_listener(self, state: str) -> None:
        for callback in self._on_state:
            self.to_loop(callback, state)

    def on_state(self, callback: Callable[[str], None]) -> None:
        """``callback(state)`` on the loop for each of kazoo's LOST, SUSPENDED, CONNECTED."""
        self._on_state.append(callback)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the session's threads. Fails with ZooKeeperUnavailable
        when disconnected, or when no answer comes within the session timeout (the call
        may still be carried out once ZooKeeper is back, as with Kafka's own timeouts)."""
        client = self.client
        if self._closed:
            raise ZooKeeperUnavailable("the ZooKeeper session is closed")
        if client is not None and not client.connected:
            raise ZooKeeperUnavailable(f"not connected to ZooKeeper at {self.hosts}")
        call = self._workers.submit(lambda: fn(*args, **kwargs))
        # asyncio.timeout rather than wait_for: wait_for (3.11) may return an outcome
        # that came as the caller was cancelled and drop the cancellation.
        try:
            async with asyncio.timeout(
                max(self.session_timeout, self.connection_timeout) if client else None
            ):
                return await asyncio.wrap_future(call)
        except TimeoutError:
            raise ZooKeeperUnavailable(f"ZooKeeper at {self.hosts} did not answer") from None
        except _UNREACHABLE as exc:
            raise ZooKeeperUnavailable(
                f"ZooKeeper at {self.hosts}: {type(exc).__name__}"
            ) from None

    def to_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """From a kazoo thread: run ``fn(*args)`` on the loop. Dropped once the session is
        closed: the broker has stopped, and its loop may be closed too."""
        loop = self.loop
        if loop is None or self._closed:
            return
        # RuntimeError: the loop closed since the check; nothing there awaits the news.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    @property
    def connected(self) -> bool:
        client = self.client
        return client is not None and client.connected and not self._closed

    @property
    def session_id(self) -> int | None:
        client = self.client
        if client is None or client.client_id is None:
            return None
        return int(client.client_id[0])

    async def stop(self) -> None:
        """Close the session, which removes this broker's ephemeral znodes at once. If
        ZooKeeper does not take the close within CLOSE_TIMEOUT_SECONDS the session is
        left to expire: the broker stops regardless."""
        self._closed = True
        client = self.client
        if client is not None:
            session = self.session_id

            def close() -> None:
                client.stop()
                client.close()

            closing = _in_daemon_thread(close, "zookeeper-close")
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                    await asyncio.wrap_future(closing)
            except TimeoutError:
                # kazoo joins its callback threads at exit, and one may be waiting on
                # ZooKeeper (a watch reading a znode) for as long as it is away.
                atexit.unregister(client.handler.stop)
                log.warning(
                    "ZooKeeper at %s did not take the close of session 0x%x within %.0f s; "
                    "it expires after zookeeper.session.timeout.ms",
                    self.hosts, session or 0, CLOSE_TIMEOUT_SECONDS,
                )
            except Exception as exc:  # noqa: BLE001 - a close that failed is a close
                log.warning("closing the ZooKeeper session: %s", exc)
        self._workers.close()


__all__ = ["KazooState", "ZkSession", "ZooKeeperUnavailable", "split_connect"]
