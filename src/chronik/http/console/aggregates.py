"""The console's aggregate view: one key's events of an event-store topic (one with
key.versioning.enable=true), read and appended through the event store's own HTTP API
code (chronik.http.eventstore), as the session's principal: its key index, its expected
version check, its ACLs (READ to read, WRITE to append) and its answers for a partition
led by another broker (421 with that broker's id) are those of GET and POST
/v1/topics/{topic}/keys/{key}/events. A wrong expected version is 409
``{"error": "version_conflict", "current_version": n}``.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol

from chronik.http.console.messages import render
from chronik.http.console.params import MAX_LIMIT, field_of, int_param
from chronik.http.server import HttpError, Request, Response

MAX_EVENTS = 1000


class EventStore(Protocol):
    """What the console uses of the event store's HTTP API (chronik.http.eventstore)."""

    async def read_events(
        self, request: Request, principal: str | None, topic: str, key: bytes,
        query: dict[str, str],
    ) -> Response: ...

    async def append_events(
        self, request: Request, principal: str | None, topic: str, key: bytes,
        query: dict[str, str],
    ) -> Response: ...


def _raw(value: str | None, encoding: str | None) -> bytes | None:
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64decode(value)
    return value.encode("utf-8")


async def read_aggregate(
    events: EventStore, request: Request, principal: str | None, topic: str, key: str,
    query: dict[str, str],
) -> dict[str, Any]:
    from_version = int_param(query, "from_version", 0, 0, 2**62)
    limit = int_param(query, "limit", 100, 1, MAX_LIMIT)
    inner = Request("GET", request.path, {}, request.peer)
    _, body, _ = await events.read_events(
        inner, principal, topic, _key(key),
        {"from_version": str(from_version), "limit": str(limit)},
    )
    out = []
    for e in body["events"]:
        value, value_format, _ = render(_raw(e["value"], e["value_encoding"]), "auto", None)
        out.append(
            {
                "version": e["version"],
                "offset": e["offset"],
                "timestamp": e["timestamp"],
                "value": value,
                "value_format": value_format,
                "headers": [
                    {"key": h["key"], "value": h["value"] if h["value_encoding"] != "base64"
                     else base64.b64decode(h["value"]).hex()}
                    for h in e["headers"]
                ],
            }
        )
    return {
        "topic": topic,
        "key": key,
        "partition": body["partition"],
        "version_count": body["version_count"],
        "events": out,
        "next_version": body.get("next_version"),
    }


async def append_aggregate(
    events: EventStore, request: Request, principal: str | None, topic: str, key: str,
    doc: dict[str, Any],
) -> dict[str, Any]:
    expected = field_of(doc, "expected_version", int, None)
    if expected is not None and expected < 0:
        raise HttpError(400, "bad_request", "expected_version must be 0 or more")
    items = field_of(doc, "events", list)
    if not items or len(items) > MAX_EVENTS:
        raise HttpError(400, "bad_request", f"give 1 to {MAX_EVENTS} events")
    subject = field_of(doc, "subject", str, None)
    headers = {"content-type": "application/json"}
    if expected is not None:
        headers["if-match"] = f'"{expected}"'
    inner = Request("POST", request.path, headers, request.peer)
    inner.body = json.dumps({"events": items}).encode()
    query = {"subject": subject} if subject else {}
    try:
        _, body, _ = await events.append_events(inner, principal, topic, _key(key), query)
    except HttpError as exc:
        if exc.status == 412 and exc.body.get("error") == "version_conflict":
            raise HttpError(
                409, "version_conflict", str(exc.body.get("message")),
                current_version=exc.body.get("actual"),
            ) from None
        raise
    versions = body["versions"]
    return {
        "partition": body["partition"],
        "first_version": versions[0],
        "last_version": versions[-1],
        "offsets": body["offsets"],
    }


def _key(text: str) -> bytes:
    if not text:
        raise HttpError(400, "bad_request", "empty key")
    return text.encode("utf-8")
