"""The web console's parts that need no broker (chronik.http.console): sessions and their
limits, settings and the listener the console uses, static file names, paging, how
values are rendered, consumer protocol assignments, Kafka errors as HTTP statuses, the
message browser's offsets to go on from, and an aggregate whose partition another broker
leads read and appended there with the session's credentials."""

from __future__ import annotations

import asyncio
import base64
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.http.console import aggregates
from chronik.http.console.groups import assignment_of
from chronik.http.console.kafka import KafkaSession, status_of
from chronik.http.console.messages import parse_offsets, render
from chronik.http.console.params import page
from chronik.http.console.sessions import COOKIE, Sessions, cookie_value, set_cookie
from chronik.http.console.settings import (
    ConsoleConfigError,
    ConsoleSettings,
    console_listener,
    is_loopback,
)
from chronik.http.console.static import static_file
from chronik.http.leader_forward import LeaderUnreachable
from chronik.http.server import HttpError, Request, Response
from chronik.security.listeners import ListenerSpec
from chronik.security.sasl_client import Credentials


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


def test_metadata_is_shared_by_a_principals_sessions_for_a_second() -> None:
    import asyncio
    from types import SimpleNamespace

    from chronik.http.console.kafka import SharedMetadata

    clock = Clock()
    shared = SharedMetadata()
    asked: list[str | None] = []

    def session(principal: str | None) -> KafkaSession:
        k = KafkaSession(("127.0.0.1", 9), None, 1.0, 2, clock=clock, principal=principal,
                         shared=shared)

        async def send(api: object, node: int = -1, **fields: object) -> object:
            asked.append(principal)
            broker = SimpleNamespace(node_id=1, host="h", port=9)
            return SimpleNamespace(brokers=(broker,), topics=(), principal=principal)

        k.send = send  # type: ignore[method-assign]
        return k

    async def scenario() -> None:
        a1, a2, b = session("User:a"), session("User:a"), session("User:b")
        first = await a1.metadata()
        assert await a2.metadata() is first  # the same principal: one request
        assert a2._addresses == {1: ("h", 9)}  # and the brokers it names are known
        assert (await b.metadata()).principal == "User:b"  # another: its own
        assert asked == ["User:a", "User:b"]
        clock.now = 1.5
        assert await a2.metadata() is not first  # older than a second: asked again
        a1.forget_metadata()
        await a2.metadata()
        assert asked == ["User:a", "User:b", "User:a", "User:a"]

    asyncio.run(scenario())


# -- going on over all partitions (offsets=P:N,...) --------------------------------------


def test_offsets_to_go_on_from() -> None:
    assert parse_offsets("", {0, 1}) is None
    assert parse_offsets("0:5,1:0", {0, 1}) == {0: 5, 1: 0}
    assert parse_offsets(" 1:7 ", {0, 1}) == {1: 7}  # a partition not named: as `from` says
    for bad in ("0:5,0:6", "2:1", "0:-1", "0", "0:", ":3", "x:1", "0:1:2", "0:1,", "0:" + "9" * 20,
                "0:" + str(2**62), ",".join(f"0:{i}" for i in range(5))):
        with pytest.raises(HttpError) as refused:
            parse_offsets(bad, {0, 1})
        assert refused.value.status == 400, bad


@given(st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**62 - 1), max_size=20))
def test_any_next_offsets_parse_back(offsets: dict[int, int]) -> None:
    text = ",".join(f"{p}:{o}" for p, o in offsets.items())
    assert parse_offsets(text, set(offsets)) == (offsets or None)


# -- an aggregate whose partition another broker leads -----------------------------------


class ElsewhereStore:
    """An event store whose every key is led by broker 3, which answers ``answer``."""

    def __init__(self, answer: tuple[int, object] | Exception) -> None:
        self.answer = answer
        self.sent: list[tuple[int, Request]] = []

    def _elsewhere(self) -> HttpError:
        return HttpError(421, "not_leader", "partition 1 of 'ev' is led by broker 3",
                         partition=1, leader=3)

    async def read_events(self, *args: object) -> Response:
        raise self._elsewhere()

    async def append_events(self, *args: object) -> Response:
        raise self._elsewhere()

    async def at_leader(self, leader: int, request: Request) -> Response:
        self.sent.append((leader, request))
        if isinstance(self.answer, Exception):
            raise self.answer
        status, body = self.answer
        return status, json.dumps(body).encode(), {"Content-Type": "application/json"}


def test_an_aggregate_led_elsewhere_is_read_and_appended_at_its_leader() -> None:
    event = {"version": 0, "offset": 4, "timestamp": 1, "value": '{"a":1}',
             "value_encoding": "utf-8", "headers": []}
    store = ElsewhereStore((200, {"partition": 1, "version_count": 1, "events": [event],
                                  "next_version": None}))
    asked = Request("GET", "/console/api/aggregates/ev/k", {}, "127.0.0.1")
    alice = Credentials("alice", "pa:ss wörd")
    found = asyncio.run(aggregates.read_aggregate(
        store, asked, "User:alice", "ev", "k/ü", {"limit": "5"}, alice))
    assert found["partition"] == 1 and found["events"][0]["value_format"] == "json"
    leader, sent = store.sent[0]
    assert leader == 3 and sent.method == "GET"
    assert sent.path == "/v1/topics/ev/keys/k%2F%C3%BC/events"
    assert sent.query == "from_version=0&limit=5"
    user, _, password = base64.b64decode(sent.headers["authorization"].split()[1]).decode() \
        .partition(":")
    assert (user, password) == ("alice", "pa:ss wörd")

    store = ElsewhereStore((201, {"partition": 1, "versions": [2, 3], "offsets": [8, 9]}))
    written = asyncio.run(aggregates.append_aggregate(
        store, asked, None, "ev", "k", {"expected_version": 2, "events": [{"value": "x"}] * 2}))
    assert written == {"partition": 1, "first_version": 2, "last_version": 3, "offsets": [8, 9]}
    _, sent = store.sent[0]
    assert sent.method == "POST" and sent.headers["if-match"] == '"2"'
    assert "authorization" not in sent.headers  # an open broker's session has none
    assert json.loads(sent.body) == {"events": [{"value": "x"}] * 2}


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        ((412, {"error": "version_conflict", "message": "conflict", "actual": 5}), 409,
         "version_conflict"),
        ((403, {"error": "forbidden", "message": "no WRITE"}), 403, "forbidden"),
        ((421, {"error": "not_leader", "message": "moved", "leader": 2}), 503,
         "leader_unreachable"),
        ((502, "not json"), 503, "leader_unreachable"),
        (LeaderUnreachable("broker 3 serves no HTTP listener (http.listen)"), 503,
         "leader_unreachable"),
    ],
)
def test_a_leaders_refusal_comes_back(answer: object, status: int, error: str) -> None:
    store = ElsewhereStore(answer)  # type: ignore[arg-type]
    asked = Request("POST", "/console/api/aggregates/ev/k", {}, "127.0.0.1")
    with pytest.raises(HttpError) as refused:
        asyncio.run(aggregates.append_aggregate(
            store, asked, None, "ev", "k", {"expected_version": 1, "events": [{"value": "x"}]}))
    assert (refused.value.status, refused.value.body["error"]) == (status, error)
    if status == 409:
        assert refused.value.body["current_version"] == 5
    if error == "leader_unreachable":
        assert "broker 3" in refused.value.body["message"]
        assert refused.value.body["leader"] == 3


def test_a_session_keeps_its_credentials_out_of_sight() -> None:
    sessions = Sessions(2, 60)
    session = sessions.create("User:alice", kafka(), Credentials("alice", "s3cret-pw"))
    assert session.credentials is not None and session.credentials.password == "s3cret-pw"
    assert "s3cret-pw" not in repr(session)
