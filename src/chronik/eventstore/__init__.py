"""chronik's event store from Python: one aggregate's events read by key, appended with an
expected version, and all events caught up on through a consumer group.

    from chronik.eventstore import EventStore, VersionConflict

    store = EventStore("127.0.0.1:9092", "http://127.0.0.1:8080")
    store.append("accounts", "acc-1", [{"type": "opened"}], expected_version=0)
    events = store.read("accounts", "acc-1")
    try:
        store.append("accounts", "acc-1", [{"type": "deposited", "amount": 5}],
                      expected_version=len(events))
    except VersionConflict as conflict:
        ...  # someone appended meanwhile: reload, decide again, retry

Reads and appends go to the broker's HTTP API (chronik.broker.http_api). Appends use it
rather than a Kafka producer because only the broker's answer to them carries what an
event store caller needs: the versions given, and on a conflict the key's actual version
(librdkafka reports INVALID_RECORD as "Broker failed to validate record", without the
broker's message), and an append of several events is one batch, all or none (librdkafka
may split the events of one flush over several batches). Kafka-protocol appends remain
open to any client (the chronik-expected-version header): ``store.producer()`` gives a
confluent-kafka Producer set up for them (acks=all, idempotence, partitioner
murmur2_random, so a key lands where the HTTP API puts it).

Catching up (``catch_up``, ``subscribe``) is a confluent-kafka consumer group; each
event's version comes from its chronik-version header, and its offset is committed only
after it was handled (at least once).

An EventStore may be shared between threads (each thread gets its own HTTP connection).
Module-level ``append``, ``read`` and ``version`` use a store made from the environment:
CHRONIK_BOOTSTRAP (default 127.0.0.1:9092) and CHRONIK_HTTP (default
http://127.0.0.1:8080).
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from chronik.eventstore import reader, subscription, writer
from chronik.eventstore.config import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_HTTP,
    client_settings,
    http_auth,
)
from chronik.eventstore.encoding import Headers
from chronik.eventstore.encoding import encode_value as encode_value
from chronik.eventstore.errors import EventStoreError as EventStoreError
from chronik.eventstore.errors import VersionConflict as VersionConflict
from chronik.eventstore.errors import raise_for as raise_for
from chronik.eventstore.events import EXPECTED_HEADER as EXPECTED_HEADER
from chronik.eventstore.events import VERSION_HEADER as VERSION_HEADER
from chronik.eventstore.events import Appended, Event
from chronik.eventstore.reader import PAGE as PAGE
from chronik.eventstore.subscription import Subscription
from chronik.eventstore.transport import IDLE_RECONNECT_S as IDLE_RECONNECT_S
from chronik.eventstore.transport import HttpTransport

if TYPE_CHECKING:
    from confluent_kafka import Producer

__all__ = [
    "Appended",
    "Event",
    "EventStore",
    "EventStoreError",
    "Subscription",
    "VersionConflict",
    "append",
    "default_store",
    "read",
    "version",
]


class EventStore:
    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP,
        http_url: str = DEFAULT_HTTP,
        *,
        auth: tuple[str, str] | None = None,
        http_timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        **client_config: object,
    ) -> None:
        """``client_config``: librdkafka settings for the consumers and ``producer()``
        (e.g. ``**{"security.protocol": "SASL_SSL", ...}`` or ``sasl_username=...``);
        ``auth``: (user, password) for the HTTP API's Basic authentication (taken from
        sasl.username / sasl.password when those are given and ``auth`` is not)."""
        self.bootstrap_servers = bootstrap_servers
        self.client_config = client_settings(bootstrap_servers, client_config)
        self._http = HttpTransport(
            http_url, http_auth(auth, self.client_config), http_timeout, ssl_context
        )
        self.http_url = http_url

    def append(
        self,
        topic: str,
        key: str | bytes,
        events: object,
        expected_version: int | None = None,
        headers: Headers | None = None,
    ) -> Appended:
        """Append ``events`` (bytes, str or JSON-able values; one value or a list) to
        ``key`` as one batch, all or none. ``expected_version``: the key's version count
        it must have (0: the key must not exist yet), else raises VersionConflict with
        nothing written; None appends unconditionally. ``headers`` go on every event.
        Returns once the events are durable (acks=all)."""
        return writer.append_events(self._http, topic, key, events, expected_version, headers)

    def read(
        self, topic: str, key: str | bytes, from_version: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The key's events from ``from_version`` (at most ``limit``), by version."""
        return reader.read_events(self._http, topic, key, from_version, limit)

    def version(self, topic: str, key: str | bytes) -> int:
        """The key's version count: how many events it has had (0: none yet)."""
        return reader.version_count(self._http, topic, key)

    def partition(self, topic: str, key: str | bytes) -> int:
        """The partition that holds (or will hold) the key's events."""
        return reader.partition_of(self._http, topic, key)

    def producer(self, **config: object) -> Producer:
        """A confluent-kafka Producer for Kafka-protocol appends to versioned topics:
        acks=all, idempotence on, partitioner murmur2_random (where the HTTP API puts a
        key). Put the chronik-expected-version header on a key's first record in a batch
        for a conditional append; a conflict is delivered as INVALID_RECORD."""
        return writer.producer(self.client_config, config)

    def subscribe(
        self,
        topic: str | list[str],
        group_id: str,
        stop_at_end: bool = False,
        poll_timeout: float = 1.0,
        **config: object,
    ) -> Subscription:
        """An iterator over every event of ``topic`` through the consumer group
        ``group_id``, from its committed offsets (the beginning for a new group). An
        event's offset is committed once the next one is asked for, or when the
        subscription is closed after it: at least once. ``stop_at_end``: end once every
        assigned partition is read to its end."""
        return subscription.subscribe(
            self.client_config, topic, group_id, stop_at_end, poll_timeout, config
        )

    def catch_up(
        self,
        topic: str | list[str],
        group_id: str,
        handler: Callable[[Event], object],
        stop_at_end: bool = True,
        # Any rather than object: besides librdkafka settings this may carry
        # subscribe's poll_timeout.
        **config: Any,
    ) -> int:
        """Hand every event not yet handled by ``group_id`` to ``handler``, committing
        each after it was handled (one the handler raised on is not), by default until
        the end of every assigned partition. Returns how many events were handled."""
        events = self.subscribe(topic, group_id, stop_at_end=stop_at_end, **config)
        return subscription.handle_all(events, handler)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: EventStore | None = None
_default_lock = threading.Lock()


def default_store() -> EventStore:
    """The store named by CHRONIK_BOOTSTRAP and CHRONIK_HTTP."""
    global _default
    with _default_lock:
        if _default is None:
            _default = EventStore(
                os.environ.get("CHRONIK_BOOTSTRAP", DEFAULT_BOOTSTRAP),
                os.environ.get("CHRONIK_HTTP", DEFAULT_HTTP),
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
