"""The store named by the environment, and the module-level ``append``, ``read`` and
``version`` that use it."""

from __future__ import annotations

import os
import threading

from chronik.eventstore.config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, DEFAULT_HTTP, HTTP_ENV
from chronik.eventstore.encoding import Headers
from chronik.eventstore.events import Appended, Event
from chronik.eventstore.store import EventStore

_default: EventStore | None = None
_default_lock = threading.Lock()


def default_store() -> EventStore:
    """The store named by CHRONIK_BOOTSTRAP and CHRONIK_HTTP."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EventStore(
                os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
                os.environ.get(HTTP_ENV, DEFAULT_HTTP),
            )
        return _default


def append(
    topic: str,
    key: str | bytes,
    events: object,
    expected_version: int | None = None,
    headers: Headers | None = None,
) -> Appended:
    return default_store().append(topic, key, events, expected_version, headers)


def read(
    topic: str, key: str | bytes, from_version: int = 0, limit: int | None = None
) -> list[Event]:
    return default_store().read(topic, key, from_version, limit)


def version(topic: str, key: str | bytes) -> int:
    return default_store().version(topic, key)
