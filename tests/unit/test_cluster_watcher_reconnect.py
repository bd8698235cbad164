"""A watch callback cut short by the ZooKeeper connection: quiet (no traceback), and what
it was reading is read again once the session is back, since kazoo's ChildrenWatch does
not call again for a listing that has not changed."""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss
from kazoo.protocol.states import KazooState

from chronik.cluster.view import ClusterView
from chronik.cluster.watcher import Watcher


class _Handler:
    def spawn(self, fn: Any, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        thread.start()
        return thread


class _Client:
    def __init__(self) -> None:
        self.connected = False
        self.handler = _Handler()
        self.children = ["1", "2"]

    def get_children(self, path: str) -> list[str]:
        return list(self.children)


class _Session:
    def __init__(self, client: _Client) -> None:
        self.client = client


def test_a_listing_cut_short_is_read_again_once_reconnected(caplog):
    client = _Client()
    watcher = Watcher(_Session(client), ClusterView())  # type: ignore[arg-type]
    seen: list[list[str]] = []
    done = threading.Event()
    fail = [ConnectionLoss()]

    def handle(children: list[str]) -> None:
        if fail:
            raise fail.pop()
        seen.append(children)
        done.set()

    on_children = watcher._children("/brokers/ids", handle)
    with caplog.at_level(logging.DEBUG):
        on_children(["1"])  # the connection drops while it reads
        assert seen == []
        client.connected = True
        watcher._on_connection(KazooState.CONNECTED)
        assert done.wait(5)
    assert seen == [["1", "2"]]
    assert "Traceback" not in caplog.text
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)


def test_a_listing_cut_short_by_the_close_is_dropped(caplog):
    client = _Client()
    watcher = Watcher(_Session(client), ClusterView())  # type: ignore[arg-type]

    def handle(children: list[str]) -> None:
        raise ConnectionClosedError("Connection has been closed")

    watcher._children("/brokers/ids", handle)(["1"])
    assert watcher._again == {}
    assert not caplog.records
