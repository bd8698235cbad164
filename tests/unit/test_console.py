"""The web console's parts that need no broker (chronik.http.console): sessions and their
limits, settings and the listener the console uses, static file names, paging, how
values are rendered, consumer protocol assignments and Kafka errors as HTTP statuses."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.http.console.groups import assignment_of
from chronik.http.console.kafka import KafkaSession, status_of
from chronik.http.console.messages import render
from chronik.http.console.params import page
from chronik.http.console.sessions import COOKIE, Sessions, cookie_value, set_cookie
from chronik.http.console.settings import (
    ConsoleConfigError,
    ConsoleSettings,
    console_listener,
    is_loopback,
)
from chronik.http.console.static import static_file
from chronik.http.server import HttpError
from chronik.security.listeners import ListenerSpec


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def kafka() -> KafkaSession:
    return KafkaSession(("127.0.0.1", 9), None, 1.0, 2)


def test_sessions_expire_and_the_oldest_makes_room() -> None:
    clock = Clock()
    sessions = Sessions(max_sessions=2, timeout=60, clock=clock)
    first = sessions.create("User:a", kafka())
    clock.now = 1
    second = sessions.create("User:b", kafka())
    clock.now = 2
    assert sessions.get(f"{COOKIE}={first.id}") is first  # touched: now the newest
    third = sessions.create("User:c", kafka())
    assert len(sessions) == 2
    assert sessions.get(f"x=1; {COOKIE}={second.id}") is None  # closed to make room
    assert second.kafka.closed
    assert sessions.get(f"{COOKIE}={third.id}") is third
    clock.now = 200
    assert sessions.get(f"{COOKIE}={first.id}") is None  # idle past the timeout
    assert first.kafka.closed
    assert sessions.get(None) is None and sessions.get(f"{COOKIE}={'x' * 500}") is None


def test_session_ids_and_csrf_tokens() -> None:
    sessions = Sessions(10, 60)
    a, b = sessions.create(None, kafka()), sessions.create(None, kafka())
    assert a.id != b.id and a.csrf != b.csrf and a.id != a.csrf
    assert len(a.id) >= 43 and len(a.csrf) >= 43
    assert a.csrf_ok(a.csrf) and not a.csrf_ok(b.csrf) and not a.csrf_ok(None)
    assert a.id not in repr(a) and a.csrf not in repr(a)
    cookie = set_cookie(a, secure=True)
    assert cookie == f"{COOKIE}={a.id}; HttpOnly; SameSite=Strict; Path=/console/; Secure"
    assert cookie_value(f"a=b; {COOKIE}={a.id}; c=d", COOKIE) == a.id
    sessions.end(a)
    assert sessions.get(f"{COOKIE}={a.id}") is None and a.kafka.closed


def test_settings() -> None:
    assert ConsoleSettings.from_values({}, "127.0.0.1").enabled
    assert ConsoleSettings.from_values({}, "localhost").enabled
    assert ConsoleSettings.from_values({}, "::1").enabled
    assert not ConsoleSettings.from_values({}, "0.0.0.0").enabled
    assert not ConsoleSettings.from_values({}, "10.1.2.3").enabled
    on = ConsoleSettings.from_values({"console.enable": "true"}, "0.0.0.0")
    assert on.enabled and on.explicit
    off = ConsoleSettings.from_values({"console.enable": "false"}, "127.0.0.1")
    assert not off.enabled
    s = ConsoleSettings.from_values({"console.max.sessions": "3"}, "127.0.0.1")
    assert (s.max_sessions, s.session_timeout, s.request_timeout) == (3, 1800.0, 10.0)
    assert s.messages_max_bytes == 10 * 1024 * 1024
    for bad in ({"console.enable": "yes"}, {"console.max.sessions": "0"},
                {"console.request.timeout.ms": "soon"}):
        with pytest.raises(ConsoleConfigError):
            ConsoleSettings.from_values(bad, "127.0.0.1")
    assert is_loopback("127.8.9.10") and not is_loopback("example.com")


def test_the_console_listener() -> None:
    plain = ListenerSpec("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    sasl = ListenerSpec("SASL", "SASL_PLAINTEXT", "127.0.0.1", 9093)
    assert console_listener([plain, sasl], False, None) is plain
    assert console_listener([plain, sasl], True, None) is sasl
    assert console_listener([plain, sasl], False, "SASL") is sasl
    with pytest.raises(ConsoleConfigError, match="no listener takes SASL"):
        console_listener([plain], True, None)
    with pytest.raises(ConsoleConfigError, match="does not take SASL"):
        console_listener([plain, sasl], True, "PLAINTEXT")
    with pytest.raises(ConsoleConfigError, match="not one of"):
        console_listener([plain], False, "OTHER")


@pytest.mark.parametrize(
    "name",
    ["../routes.py", "..", ".hidden.js", "a/b.js", "routes.py", "x" * 200 + ".js",
     "index.html\x00.js", "nope.js", "%2e%2e.js"],
)
def test_static_names_outside_the_directory_are_not_found(name: str) -> None:
    with pytest.raises(HttpError) as caught:
        static_file(name)
    assert caught.value.status == 404


def test_paging_filters_and_sorts() -> None:
    items = [f"topic-{i:03d}" for i in range(30)] + ["Other"]
    total, chosen = page({"q": "TOPIC-01", "limit": "5", "offset": "2"}, items, str)
    assert total == 10 and chosen == [f"topic-01{i}" for i in range(2, 7)]
    assert page({}, items, str)[1][0] == "Other"
    for bad in ({"limit": "501"}, {"limit": "0"}, {"offset": "-1"}, {"q": "x" * 300}):
        with pytest.raises(HttpError):
            page(bad, items, str)


def test_values_are_rendered_by_format() -> None:
    assert render(None, "auto", None) == (None, None, None)
    assert render(b"hello", "auto", None) == ("hello", "text", None)
    assert render(b"\xff\x00", "auto", None) == ("ff00", "hex", None)
    text, fmt, _ = render(b'{"a":[1,2]}', "auto", None)
    assert fmt == "json" and json.loads(text) == {"a": [1, 2]} and "\n" in text
    assert render(b'{"a":1}', "text", None) == ('{"a":1}', "text", None)
    assert render(b"42", "json", None) == ("42", "text", None)
    assert render(b"abc", "hex", None) == ("616263", "hex", None)

    def decoder(value: bytes | None) -> dict[str, object]:
        return {"schema_id": 7, "value_json": {"x": 1}} if value and value[0] == 0 else {}

    framed = b"\x00\x00\x00\x00\x07payload"
    text, fmt, schema_id = render(framed, "auto", decoder)
    assert (fmt, schema_id, json.loads(text)) == ("schema", 7, {"x": 1})
    assert render(framed, "hex", decoder)[1:] == ("hex", None)


@given(st.binary(max_size=64), st.sampled_from(["auto", "text", "json", "hex"]))
def test_any_value_renders(value: bytes, fmt: str) -> None:
    text, shown, _ = render(value, fmt, None)
    assert isinstance(text, str) and shown in ("text", "json", "hex")
    if shown == "hex":
        assert bytes.fromhex(text) == value


def test_consumer_assignments() -> None:
    def assignment(topics: dict[str, list[int]]) -> bytes:
        out = struct.pack(">hi", 0, len(topics))
        for name, partitions in topics.items():
            out += struct.pack(">h", len(name)) + name.encode()
            out += struct.pack(">i", len(partitions)) + b"".join(
                struct.pack(">i", p) for p in partitions)
        return out + struct.pack(">i", -1)

    data = assignment({"b": [1, 0], "a": [2]})
    assert assignment_of(data) == [{"topic": "a", "partition": 2}, {"topic": "b", "partition": 0},
                                   {"topic": "b", "partition": 1}]
    assert assignment_of(b"") == [] and assignment_of(data[:9]) == []


@given(st.binary(max_size=40))
def test_any_assignment_bytes_parse_or_give_none(data: bytes) -> None:
    assert isinstance(assignment_of(data), list)


def test_kafka_errors_as_http_statuses() -> None:
    assert status_of(29) == 403  # TOPIC_AUTHORIZATION_FAILED
    assert status_of(30) == 403  # GROUP_AUTHORIZATION_FAILED
    assert status_of(31) == 403  # CLUSTER_AUTHORIZATION_FAILED
    assert status_of(3) == 404  # UNKNOWN_TOPIC_OR_PARTITION
    assert status_of(69) == 404  # GROUP_ID_NOT_FOUND
    assert status_of(36) == 409  # TOPIC_ALREADY_EXISTS
    assert status_of(68) == 409  # NON_EMPTY_GROUP
    assert status_of(17) == 400  # INVALID_TOPIC_EXCEPTION
    assert status_of(40) == 400  # INVALID_CONFIG
    assert status_of(14) == 503  # COORDINATOR_LOAD_IN_PROGRESS, retriable
    assert status_of(5) == 503  # LEADER_NOT_AVAILABLE
