"""Appending: a key's events as one batch through the HTTP API, and a Producer for
appends over the Kafka protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote

from chronik.eventstore.config import librdkafka
from chronik.eventstore.encoding import Headers, b64, encode_headers, encode_value
from chronik.eventstore.errors import VersionConflict
from chronik.eventstore.events import Appended
from chronik.eventstore.transport import HttpTransport, key_path

if TYPE_CHECKING:
    from confluent_kafka import Producer


def append_events(
    http: HttpTransport,
    topic: str,
    key: str | bytes,
    events: object,
    expected_version: int | None = None,
    headers: Headers | None = None,
    subject: str | None = None,
) -> Appended:
    if not isinstance(events, list):
        events = [events]
    if not events:
        raise ValueError("no events to append")
    shared = [
        {"key": name, "value": b64(value), "value_encoding": "base64"}
        for name, value in encode_headers(headers)
    ]
    if subject is None:
        body = {
            "events": [
                {"value": b64(encode_value(e)), "value_encoding": "base64", "headers": shared}
                for e in events
            ]
        }
    else:  # JSON documents, encoded by the broker with the subject's latest schema
        body = {
            "events": [{"value": e, "value_encoding": "json", "headers": shared} for e in events]
        }
    sent: dict[str, str] = {}
    if expected_version is not None:
        if expected_version < 0:
            raise ValueError("expected_version must be 0 or more")
        sent["If-Match"] = f'"{int(expected_version)}"'
    path = key_path(topic, key, events=True)
    if subject is not None:
        sep = "&" if "?" in path else "?"
        path = f"{path}{sep}subject={quote(subject, safe='')}"
    try:
        # An unconditional append is not resent after a dropped connection: it may
        # have been written. A conditional one is safe to resend (at worst a conflict).
        _, doc, _ = http.request("POST", path, body, sent, retry=expected_version is not None)
    except VersionConflict as conflict:
        # The caller's key, as given, rather than the broker's rendering of it.
        raise VersionConflict(key, conflict.expected, conflict.actual) from None
    return Appended(doc["partition"], doc["first_version"], doc["versions"], doc["offsets"])


def producer(client_config: Mapping[str, object], config: Mapping[str, object]) -> Producer:
    # confluent_kafka is loaded only once a Kafka client is asked for.
    from confluent_kafka import Producer

    settings = {
        **client_config,
        "acks": "all",
        "enable.idempotence": True,
        # murmur2_random puts a key on the partition the HTTP API puts it on.
        "partitioner": "murmur2_random",
        **librdkafka(config),
    }
    return Producer(settings)
