"""The ZooKeeper session's edges with the event loop and the process: news from kazoo's
threads never reaches a closed loop, a close that ZooKeeper does not answer is given up,
and no thread a call may be waiting on holds the process at exit."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from chronik.cluster import session as session_module
from chronik.cluster.session import KazooState, ZkSession, ZooKeeperUnavailable


def _session() -> ZkSession:
    return ZkSession("127.0.0.1:1/chroot", 6000, 10000)


def test_state_changes_after_the_loop_closed_are_dropped():
    session = _session()
    seen: list[str] = []
    session.on_state(seen.append)
    loop = asyncio.new_event_loop()
    session.loop = loop
    loop.close()
    # What kazoo's connection thread does when ZooKeeper comes back after the broker stopped.
    session._state_listener(KazooState.CONNECTED)
    session.to_loop(seen.append, "watch")
    assert seen == []


def test_state_changes_after_stop_are_dropped():
    session = _session()
    seen: list[str] = []
    session.on_state(seen.append)

    async def scenario() -> None:
        session.loop = asyncio.get_running_loop()
        session._state_listener(KazooState.SUSPENDED)
        await asyncio.sleep(0)
        await session.stop()
        session._state_listener(KazooState.CONNECTED)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert seen == [KazooState.SUSPENDED]


class _UnansweredClient:
    """A kazoo client whose ZooKeeper never answers: stop() waits forever."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.connected = False
        self.client_id = (0x1234, b"")
        self.handler = SimpleNamespace(stop=lambda: None)

    def stop(self) -> None:
        self.release.wait()

    def close(self) -> None:
        pass


def test_stop_gives_up_on_a_close_zookeeper_does_not_answer(monkeypatch, caplog):
    monkeypatch.setattr(session_module, "CLOSE_TIMEOUT_SECONDS", 0.3)
    session = _session()
    client = _UnansweredClient()
    session.client = client  # type: ignore[assignment]

    async def scenario() -> float:
        session.loop = asyncio.get_running_loop()
        started = time.monotonic()
        await session.stop()
        return time.monotonic() - started

    try:
        took = asyncio.run(scenario())
        assert took < 2.0
        assert "did not take the close of session 0x1234" in caplog.text
        with pytest.raises(ZooKeeperUnavailable):
            asyncio.run(session.run(lambda: None))
    finally:
        client.release.set()


def test_calls_run_on_daemon_threads():
    """A call kazoo holds until ZooKeeper is back must not hold the process's exit."""
    session = _session()
    gate = threading.Event()

    async def scenario() -> list[threading.Thread]:
        task = asyncio.ensure_future(session.run(gate.wait))
        await asyncio.sleep(0.1)
        busy = [t for t in threading.enumerate() if t.name.startswith("zookeeper")]
        gate.set()
        await task
        return busy

    busy = asyncio.run(scenario())
    assert busy and all(t.daemon for t in busy)
    session._workers.close()
