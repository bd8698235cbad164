"""The console's aggregate view: one key's events of an event-store topic (one with
key.versioning.enable=true), read and appended through the event store's own HTTP API
code (chronik.http.eventstore), as the session's principal: its key index, its expected
version check and its ACLs (READ to read, WRITE to append) are those of GET and POST
/v1/topics/{topic}/keys/{key}/events. A wrong expected version is 409
``{"error": "version_conflict", "current_version": n}``.

A key whose partition another broker leads is read or appended there: the request goes
to that broker's event store API (its HTTP listener, as registered in ZooKeeper) with
the session user's HTTP Basic credentials, made here from the session's (never sent to
the page), and its answer is shown as a local one would be. The forwarded request is
marked (chronik.http.leader_forward) so the leader never forwards it on; when the leader
serves no HTTP listener, does not answer, or no longer leads the partition, the answer
is 503 ``leader_unreachable`` saying which.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from chronik.http.console.messages import render
from chronik.http.console.params import MAX_LIMIT, field_of, int_param
from chronik.http.leader_forward import LeaderUnreachable, led_by
from chronik.http.server import HttpError, Request, Response
from chronik.security.sasl_client import Credentials

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

    async def at_leader(self, leader: int, request: Request) -> Response: ...


def _raw(value: str | None, encoding: str | None) -> bytes | None:
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64decode(value)
    return value.encode("utf-8")


async def _here_or_at_leader(
    events: EventStore, call: Any, inner: Request, principal: str | None, topic: str,
    key: str, query: dict[str, str], credentials: Credentials | None,
) -> Any:
    """The event store's answer for a key: from this broker, or forwarded to the broker
    that leads the key's partition when this one does not."""
    try:
        _, body, _ = await call(inner, principal, topic, _key(key), query)
    except HttpError as exc:
        leader = led_by(exc)
        if leader is None:
            raise
        body = await _at_leader(events, leader, exc, inner, topic, key, query, credentials)
    return body


async def read_aggregate(
    events: EventStore, request: Request, principal: str | None, topic: str, key: str,
    query: dict[str, str], credentials: Credentials | None = None,
) -> dict[str, Any]:
    from_version = int_param(query, "from_version", 0, 0, 2**62)
    limit = int_param(query, "limit", 100, 1, MAX_LIMIT)
    inner = Request("GET", request.path, {}, request.peer)
    asked = {"from_version": str(from_version), "limit": str(limit)}
    body = await _here_or_at_leader(
        events, events.read_events, inner, principal, topic, key, asked, credentials
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
    doc: dict[str, Any], credentials: Credentials | None = None,
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
        body = await _here_or_at_leader(
            events, events.append_events, inner, principal, topic, key, query, credentials
        )
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


async def _at_leader(
    events: EventStore, leader: int, refused: HttpError, inner: Request, topic: str, key: str,
    query: dict[str, str], credentials: Credentials | None,
) -> dict[str, Any]:
    """The event store API's answer of broker ``leader`` to ``inner`` (made as a request
    of /v1/topics/{topic}/keys/{key}/events), as the session's user; its refusals raised
    as HttpError as a local answer's would be."""
    partition = refused.body.get("partition")
    where = f"partition {partition} of {topic!r} is led by broker {leader}"
    target = f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key, safe='')}/events"
    if query:
        target += "?" + urlencode(query)
    headers = {k: v for k, v in inner.headers.items() if k in ("content-type", "if-match")}
    if credentials is not None:
        pair = f"{credentials.user}:{credentials.password}".encode()
        headers["authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    forwarded = Request(inner.method, target, headers, inner.peer)
    forwarded.body = inner.body
    try:
        status, raw, _ = await events.at_leader(leader, forwarded)
    except LeaderUnreachable as exc:
        raise HttpError(
            503, "leader_unreachable", f"{where}: {exc}", partition=partition, leader=leader
        ) from None
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise HttpError(
            503, "leader_unreachable", f"{where}, whose answer ({status}) is not JSON",
            partition=partition, leader=leader,
        )
    if status == 421:
        # The leader moved on between the two brokers' looks: no second hop.
        raise HttpError(
            503, "leader_unreachable",
            f"{where}, which says broker {body.get('leader')} leads it now: try again",
            partition=partition, leader=leader,
        )
    if status >= 300:
        fields = {k: v for k, v in body.items() if k not in ("error", "message")}
        raise HttpError(
            status, str(body.get("error", "forwarded")), str(body.get("message", "")), **fields
        )
    return body


def _key(text: str) -> bytes:
    if not text:
        raise HttpError(400, "bad_request", "empty key")
    return text.encode("utf-8")
