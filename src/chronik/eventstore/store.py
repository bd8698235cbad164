"""EventStore: one object for reading, appending and catching up, over the HTTP API and
the Kafka protocol."""

from __future__ import annotations

import ssl
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
from chronik.eventstore.events import Appended, Event
from chronik.eventstore.subscription import Subscription
from chronik.eventstore.transport import HttpTransport

if TYPE_CHECKING:
    from confluent_kafka import Producer


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
        subject: str | None = None,
    ) -> Appended:
        """Append ``events`` (bytes, str or JSON-able values; one value or a list) to
        ``key`` as one batch, all or none. ``expected_version``: the key's version count
        it must have (0: the key must not exist yet), else raises VersionConflict with
        nothing written; None appends unconditionally. ``headers`` go on every event.
        Returns once the events are durable (acks=all). ``subject``: a subject of the
        broker's schema registry; the events are then JSON documents, checked against and
        written in its latest schema (an EventStoreError 422 ``value_mismatch`` when one
        does not fit, nothing written)."""
        return writer.append_events(
            self._http, topic, key, events, expected_version, headers, subject
        )

    def read(
        self,
        topic: str,
        key: str | bytes,
        from_version: int = 0,
        limit: int | None = None,
        decode: bool = False,
    ) -> list[Event]:
        """The key's events from ``from_version`` (at most ``limit``), by version.
        ``decode``: values in Confluent's wire format come with ``schema_id`` and
        ``value_json`` (decoded with their writer schema by the broker's registry)."""
        return reader.read_events(self._http, topic, key, from_version, limit, decode)

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
