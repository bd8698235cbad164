"""The event store's HTTP API (chronik.http.eventstore), its Python API
(chronik.eventstore) and `chronik events` against a real `chronik serve --set
http.listen=...`: a key's events as the API answers them equal what a full scan of the
partition finds, conditional appends refused with 412 write nothing, binary keys and
values, error statuses, Basic auth and ACLs on a secured broker, and hostile HTTP input
leaving the broker up."""

from __future__ import annotations

import base64
import http.client
import json
import random
import shutil
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from chronik.eventstore import EventStore, VersionConflict
from chronik.records.partitioner import murmur2, partition_for_key
from conftest import BrokerProcess, free_port, wait_for_port

from .cli_support import chronik
from .helpers import create_topic, topic_name

ROOT = Path(__file__).resolve().parents[2]
VERSIONED = {"key.versioning.enable": "true"}
PARTITIONS = 4


class Api:
    def __init__(self, broker: BrokerProcess, port: int) -> None:
        self.broker = broker
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            payload = raw if raw is not None else (json.dumps(body).encode() if body else None)
            conn.request(method, path, body=payload, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
            try:
                doc = json.loads(data)
            except ValueError:
                doc = data
            return response.status, doc, {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()


def start_http_broker(data: Path, extra: dict[str, str] | None = None) -> tuple[BrokerProcess, int]:
    port = free_port()
    broker = BrokerProcess(
        data,
        {"http.listen": f"127.0.0.1:{port}", "http.request.timeout.ms": "1500", **(extra or {})},
    )
    return broker, port


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    broker, port = start_http_broker(tmp_path_factory.mktemp("es") / "data")
    broker.start()
    wait_for_port(port, 30, proc=broker.proc)
    try:
        yield Api(broker, port)
    finally:
        broker.kill()


def key_path(topic: str, key: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key, safe='')}"


def scan(
    bootstrap: str, topic: str, partitions: int = PARTITIONS
) -> dict[bytes, list[tuple[int, int, int, bytes, list]]]:
    """Every record of every partition by key: (partition, offset, version, value,
    headers), in offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "scan", "enable.auto.commit": False}
    )
    out: dict[bytes, list[tuple[int, int, int, bytes, list]]] = defaultdict(list)
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if high <= low:
            continue
        consumer.assign([TopicPartition(topic, p, low)])
        last = low - 1
        deadline = time.monotonic() + 20
        while last < high - 1 and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    continue
                last = msg.offset()
                headers = list(msg.headers() or [])
                if msg.key() is None:
                    assert "chronik-version" not in dict(headers)
                    continue
                version = int(dict(headers)["chronik-version"])
                out[msg.key()].append((p, msg.offset(), version, msg.value(), headers))
        assert last == high - 1
    consumer.close()
    return out


def http_read_all(api: Api, topic: str, key: str, page: int) -> tuple[int, list[dict]]:
    events: list[dict] = []
    next_version: int | None = 0
    count = -1
    while next_version is not None:
        status, doc, headers = api.call(
            "GET", f"{key_path(topic, key)}/events?from_version={next_version}&limit={page}"
        )
        assert status == 200, doc
        assert len(doc["events"]) <= page
        assert headers["etag"] == f'"{doc["version_count"]}"'
        count = doc["version_count"]
        events += doc["events"]
        next_version = doc["next_version"]
    return count, events


def test_murmur2_is_javas() -> None:
    # Values from Kafka's UtilsTest / DefaultPartitionerTest.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(bytes([ord("a"), ord("b"), ord("c")])) == 479470107


def test_reads_equal_a_scan_of_the_partition(api: Api) -> None:
    topic = topic_name("es-scan")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    rnd = random.Random(7)
    keys = [f"acc-{i}" for i in range(40)] + ["ünï/cödé key", "a b?c&d=e#f"]
    producer = Producer(
        {
            "bootstrap.servers": api.broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    store = EventStore(api.broker.bootstrap, api.url)
    for i in range(400):
        key = rnd.choice(keys)
        if i % 5 == 0:  # over HTTP, conditional on the current version
            assert producer.flush(30) == 0
            store.append(
                topic, key, [f"h{i}", {"n": i}], expected_version=store.version(topic, key)
            )
        else:
            producer.produce(topic, key=key.encode(), value=f"k{i}".encode(), headers=[("h", b"v")])
            producer.poll(0)
    assert producer.flush(30) == 0
    # Unkeyed records between them change nothing.
    producer.produce(topic, value=b"no key", partition=1)
    producer.flush(30)
    scanned = scan(api.broker.bootstrap, topic)
    assert set(scanned) == {k.encode() for k in keys}
    for key in keys:
        records = scanned[key.encode()]
        partition = {p for p, *_ in records}
        assert partition == {partition_for_key(key.encode(), PARTITIONS)}
        count, events = http_read_all(api, topic, key, page=rnd.choice((1, 3, 7, 1000)))
        assert count == len(records)
        assert [
            (e["partition"], e["offset"], e["version"], e["value"].encode()) for e in events
        ] == [(p, o, v, value) for p, o, v, value, _ in records]
        assert [e["version"] for e in events] == list(range(len(records)))
        for e, (*_, headers) in zip(events, records, strict=True):
            assert [(h["key"], h["value"].encode()) for h in e["headers"]] == headers
            assert e["key"] == key and e["value_encoding"] == "utf-8"
        status, probe, _ = api.call("GET", key_path(topic, key))
        assert status == 200 and probe["version_count"] == len(records)
        assert probe["partition"] == next(iter(partition))
    status, doc, _ = api.call("GET", f"{key_path(topic, 'never-written')}/events")
    assert status == 200 and doc["version_count"] == 0 and doc["events"] == []
    assert doc["next_version"] is None


def test_if_match_conflicts_write_nothing(api: Api) -> None:
    topic = topic_name("es-cond")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    path = key_path(topic, "order-1") + "/events"
    body = {"events": [{"value": "created"}, {"value": "paid", "headers": {"by": "bob"}}]}
    status, doc, headers = api.call("POST", path, body, {"If-None-Match": "*"})
    assert status == 201, doc
    assert doc["first_version"] == 0 and doc["versions"] == [0, 1]
    assert doc["offsets"] == [doc["offsets"][0], doc["offsets"][0] + 1]
    assert headers["etag"] == '"2"'
    for precondition in ({"If-None-Match": "*"}, {"If-Match": '"1"'}, {"If-Match": '"3"'}):
        status, doc, _ = api.call("POST", path, {"events": [{"value": "x"}]}, precondition)
        assert status == 412, doc
        assert doc["error"] == "version_conflict" and doc["actual"] == 2
        assert doc["key"] == "order-1"
    status, doc, _ = api.call("POST", path, {"events": [{"value": "shipped"}]}, {"If-Match": '"2"'})
    assert status == 201 and doc["versions"] == [2]
    status, doc, _ = api.call("GET", path)
    assert [e["value"] for e in doc["events"]] == ["created", "paid", "shipped"]
    scanned = scan(api.broker.bootstrap, topic)
    assert [value for *_, value, _ in scanned[b"order-1"]] == [b"created", b"paid", b"shipped"]
    # If-Match: * needs the key to exist.
    status, doc, _ = api.call(
        "POST", key_path(topic, "none") + "/events", {"events": [{"value": "x"}]}, {"If-Match": "*"}
    )
    assert status == 412
    status, doc, _ = api.call("GET", key_path(topic, "none"))
    assert doc["version_count"] == 0


def test_binary_keys_and_values(api: Api) -> None:
    topic = topic_name("es-bin")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    key = b"\xff\x00\xfe binary"
    b64key = base64.urlsafe_b64encode(key).decode().rstrip("=")
    path = f"/v1/topics/{topic}/keys/{b64key}/events?key_encoding=base64"
    value = bytes(range(256))
    body = {
        "events": [
            {
                "value": base64.b64encode(value).decode(),
                "value_encoding": "base64",
                "headers": [{"key": "raw", "value": "gA==", "value_encoding": "base64"}],
            }
        ]
    }
    status, doc, _ = api.call("POST", path, body, {"If-Match": '"0"'})
    assert status == 201, doc
    status, doc, _ = api.call("GET", path)
    assert status == 200
    (event,) = doc["events"]
    assert event["value_encoding"] == "base64"
    assert base64.b64decode(event["value"]) == value
    assert event["key_encoding"] == "base64" and base64.b64decode(event["key"]) == key
    assert {"key": "raw", "value": "gA==", "value_encoding": "base64"} in event["headers"]
    scanned = scan(api.broker.bootstrap, topic)
    assert [v for *_, v, _ in scanned[key]] == [value]
    store = EventStore(api.broker.bootstrap, api.url)
    assert [e.value for e in store.read(topic, key)] == [value]
    assert store.version(topic, key) == 1


def test_error_statuses(api: Api) -> None:
    plain = topic_name("es-plain")
    create_topic(api.broker.bootstrap, plain, 1)
    topic = topic_name("es-err")
    create_topic(api.broker.bootstrap, topic, 1, **VERSIONED)
    events = key_path(topic, "k") + "/events"
    cases: list[tuple[str, str, Any, dict[str, str], int]] = [
        ("GET", key_path("no-such-topic", "k") + "/events", None, {}, 404),
        ("POST", key_path("no-such-topic", "k") + "/events", {"events": [{"value": "x"}]}, {}, 404),
        ("GET", key_path(plain, "k") + "/events", None, {}, 409),
        ("POST", key_path(plain, "k") + "/events", {"events": [{"value": "x"}]}, {}, 409),
        ("GET", events + "?limit=0", None, {}, 400),
        ("GET", events + "?limit=1001", None, {}, 400),
        ("GET", events + "?from_version=-1", None, {}, 400),
        ("GET", events + "?from_version=abc", None, {}, 400),
        ("GET", f"/v1/topics/{topic}/keys/!!!/events?key_encoding=base64", None, {}, 400),
        ("GET", f"/v1/topics/{topic}/keys/%FF/events", None, {}, 400),
        ("GET", events + "?key_encoding=rot13", None, {}, 400),
        ("POST", events, {"events": []}, {}, 400),
        ("POST", events, {"nope": 1}, {}, 400),
        ("POST", events, {"events": [{"valu": "x"}]}, {}, 400),
        ("POST", events, {"events": [{"value": "x", "value_encoding": "hex"}]}, {}, 400),
        ("POST", events, {"events": [{"value": "%%%", "value_encoding": "base64"}]}, {}, 400),
        ("POST", events, {"events": [{"value": "x", "headers": {"h": 5}}]}, {}, 400),
        (
            "POST",
            events,
            {"events": [{"value": "x", "headers": {"chronik-expected-version": "0"}}]},
            {},
            400,
        ),
        ("POST", events, {"events": [{"value": "x"}]}, {"If-Match": "three"}, 400),
        ("POST", events, {"events": [{"value": "x"}]}, {"If-None-Match": '"1"'}, 400),
        ("DELETE", events, None, {}, 405),
        ("GET", "/v2/whatever", None, {}, 404),
        ("GET", f"/v1/topics/{topic}/keys/k/other", None, {}, 404),
    ]
    for method, path, body, headers, expected in cases:
        status, doc, _ = api.call(method, path, body, headers)
        assert status == expected, (method, path, body, doc)
        assert isinstance(doc, dict) and doc["error"], doc
    status, doc, _ = api.call("POST", events, raw=b"{not json", headers={})
    assert status == 400 and doc["error"] == "bad_request"
    big = {"events": [{"value": "x" * (1024 * 1024)}]}
    status, doc, _ = api.call("POST", events, big)
    assert status == 413
    # Nothing of any of these was written.
    status, doc, _ = api.call("GET", events)
    assert doc["version_count"] == 0
    assert scan(api.broker.bootstrap, topic, 1) == {}
    status, doc, headers = api.call("GET", "/v1/openapi.yaml")
    assert status == 200 and headers["content-type"] == "application/yaml"
    assert doc == (ROOT / "docs" / "eventstore-openapi.yaml").read_bytes()


def raw_exchange(port: int, data: bytes, wait: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            return b"".join(chunks) + b"<timeout>"
        return b"".join(chunks)


def test_hostile_input_leaves_the_broker_up(api: Api) -> None:
    assert raw_exchange(api.port, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw_exchange(api.port, b"\x16\x03\x01\x00\xff" + bytes(300) + b"\r\n\r\n").startswith(
        b"HTTP/1.1 400"
    )
    huge = b"GET /v1/openapi.yaml HTTP/1.1\r\n" + b"X-Big: " + b"a" * 40000 + b"\r\n\r\n"
    assert raw_exchange(api.port, huge).startswith(b"HTTP/1.1 431")
    many = b"GET /v1/openapi.yaml HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
    assert raw_exchange(api.port, many).startswith(b"HTTP/1.1 431")
    lying = b"POST /v1/topics/t/keys/k/events HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"
    assert raw_exchange(api.port, lying).startswith(b"HTTP/1.1 4")
    chunked = b"POST /v1/topics/t/keys/k/events HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert raw_exchange(api.port, chunked).startswith(b"HTTP/1.1 411")
    # Slow clients: a partial head, or a body shorter than announced, is cut off by
    # http.request.timeout.ms (1.5 s here) with 408; an idle connection is just closed.
    started = time.monotonic()
    assert raw_exchange(api.port, b"GET /v1/openapi.yaml HTTP/1.1\r\nX-Slow: ").startswith(
        b"HTTP/1.1 408"
    )
    short = b"POST /v1/topics/t/keys/k/events HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"
    assert raw_exchange(api.port, short).startswith(b"HTTP/1.1 408")
    assert raw_exchange(api.port, b"") == b""
    assert time.monotonic() - started < 15
    # Keep-alive: several requests on one connection, then the broker still serves.
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    for _ in range(3):
        conn.request("GET", "/v1/openapi.yaml")
        assert conn.getresponse().read().startswith(b"openapi:")
    conn.close()
    assert api.broker.running
    status, _, _ = api.call("GET", "/v1/openapi.yaml")
    assert status == 200


def test_python_api(api: Api) -> None:
    topic = topic_name("es-py")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    store = EventStore(api.broker.bootstrap, api.url)
    done = store.append(topic, "acc-1", [{"type": "opened"}, "str", b"\x00raw"], expected_version=0)
    assert done.first_version == 0 and done.versions == [0, 1, 2]
    assert done.partition == partition_for_key(b"acc-1", PARTITIONS)
    with pytest.raises(VersionConflict) as caught:
        store.append(topic, "acc-1", {"type": "deposited"}, expected_version=1)
    assert (caught.value.key, caught.value.expected, caught.value.actual) == ("acc-1", 1, 3)
    assert str(caught.value) == "version conflict on key 'acc-1': expected 1, actual 3"
    assert store.version(topic, "acc-1") == 3
    more = store.append(
        topic,
        "acc-1",
        [{"type": "deposited", "n": i} for i in range(5)],
        headers={"source": "test"},
    )
    assert more.versions == [3, 4, 5, 6, 7]
    events = store.read(topic, "acc-1")
    assert [e.version for e in events] == list(range(8))
    assert events[0].json() == {"type": "opened"} and events[2].value == b"\x00raw"
    assert ("source", b"test") in events[5].headers
    assert [e.version for e in store.read(topic, "acc-1", from_version=6)] == [6, 7]
    assert [e.version for e in store.read(topic, "acc-1", from_version=2, limit=3)] == [2, 3, 4]
    assert store.version(topic, "acc-unknown") == 0 and store.read(topic, "acc-unknown") == []
    store.append(topic, "acc-2", "one", expected_version=0)
    seen: list[Any] = []
    assert store.catch_up(topic, "projection", seen.append) == 9
    assert sorted((e.key, e.version) for e in seen) == sorted(
        [(b"acc-1", v) for v in range(8)] + [(b"acc-2", 0)]
    )
    store.append(topic, "acc-2", "two", expected_version=1)
    again: list[Any] = []
    assert store.catch_up(topic, "projection", again.append) == 1  # only what is new
    assert [(e.key, e.version, e.value) for e in again] == [(b"acc-2", 1, b"two")]
    # A handler that fails leaves its event uncommitted: it comes again.
    store.append(topic, "acc-2", "three", expected_version=2)

    def fail(event: Any) -> None:
        raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        store.catch_up(topic, "projection", fail)
    retried: list[Any] = []
    assert store.catch_up(topic, "projection", retried.append) == 1
    assert retried[0].value == b"three"
    with store.subscribe(topic, "iterating", stop_at_end=True) as sub:
        assert len(list(sub)) == 11
    # A Kafka-protocol conditional append with the producer the store sets up.
    producer = store.producer()
    outcome: list[Any] = []
    producer.produce(
        topic,
        key=b"acc-2",
        value=b"four",
        headers=[("chronik-expected-version", b"2")],
        on_delivery=lambda err, msg: outcome.append(err),
    )
    producer.flush(30)
    assert outcome[0] is not None and outcome[0].code() == 87
    assert store.version(topic, "acc-2") == 3


def test_cli(api: Api) -> None:
    topic = topic_name("es-cli")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    common = ["--http", api.url, "--bootstrap-server", api.broker.bootstrap]
    done = chronik(
        "events",
        "append",
        topic,
        "k",
        "--new",
        "--value",
        "a",
        "--value",
        "b",
        "--header",
        "who=cli",
        *common,
    )
    assert done.returncode == 0, done.stderr
    assert "version 0-1" in done.stdout
    done = chronik(
        "events", "append", topic, "k", "--expected-version", "2", *common, input="c\nd\n"
    )
    assert done.returncode == 0, done.stderr
    done = chronik(
        "events", "append", topic, "k", "--expected-version", "3", "--value", "x", *common
    )
    assert done.returncode == 1
    assert (
        done.stderr.strip() == "chronik: error: version conflict on key 'k': expected 3, actual 4"
    )
    done = chronik("events", "read", topic, "k", *common)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\ta\n1\tb\n2\tc\n3\td\n"
    done = chronik(
        "events", "read", topic, "k", "--from-version", "1", "--limit", "2", "--json", *common
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["version"], e["value"]) for e in lines] == [(1, "b"), (2, "c")]
    assert {"key": "who", "value": "cli", "value_encoding": "utf-8"} in lines[0]["headers"]
    done = chronik("events", "read", "no-such-topic", "k", *common)
    assert done.returncode == 1 and done.stderr.startswith("chronik: error: no topic")


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl")
def test_curl(api: Api) -> None:
    topic = topic_name("es-curl")
    create_topic(api.broker.bootstrap, topic, PARTITIONS, **VERSIONED)
    url = f"{api.url}/v1/topics/{topic}/keys/cart-7/events"
    body = json.dumps({"events": [{"value": {"item": "tea", "qty": 2}}]})
    posted = subprocess.run(
        [
            "curl",
            "-sS",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            'If-Match: "0"',
            "-d",
            body,
            "-w",
            "\n%{http_code}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    doc, status = posted.stdout.rsplit("\n", 1)
    assert status == "201", posted.stdout + posted.stderr
    assert json.loads(doc)["versions"] == [0]
    got = subprocess.run(["curl", "-sS", "-i", url], capture_output=True, text=True, timeout=30)
    assert got.stdout.startswith("HTTP/1.1 200")
    assert 'etag: "1"' in got.stdout.lower()
    events = json.loads(got.stdout.replace("\r\n", "\n").split("\n\n", 1)[1])["events"]
    assert json.loads(events[0]["value"]) == {"item": "tea", "qty": 2}


# -- a secured broker: Basic auth against the SCRAM store, ACLs --------------------------
ADMIN, ADMIN_PASSWORD = "admin", "admin-Pa55word"
ALICE, ALICE_PASSWORD = "alice", "alice-Secret-42"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, int]]:
    data = tmp_path_factory.mktemp("es-acl") / "data"
    for user, password in ((ADMIN, ADMIN_PASSWORD), (ALICE, ALICE_PASSWORD)):
        done = chronik(
            "users", "add", user, "--password-stdin", "--data-dir", str(data), input=password + "\n"
        )
        assert done.returncode == 0, done.stderr
    sasl_port = free_port()
    broker, port = start_http_broker(data)
    broker.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "authorizer.class.name": "chronik",
            "super.users": f"User:{ADMIN}",
        }
    )
    broker.start()
    wait_for_port(port, 30, proc=broker.proc)
    try:
        yield Api(broker, port), sasl_port
    finally:
        broker.kill()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_and_acls(secured: tuple[Api, int]) -> None:
    api, sasl_port = secured
    admin_conf = {
        "bootstrap.servers": f"127.0.0.1:{sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ADMIN,
        "sasl.password": ADMIN_PASSWORD,
    }
    admin = AdminClient(admin_conf)
    topic = topic_name("es-sec")
    admin.create_topics([NewTopic(topic, 2, 1, config=VERSIONED)])[topic].result(30)
    read_acl = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        f"User:{ALICE}",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([read_acl], request_timeout=10).values():
        future.result()
    events = key_path(topic, "k") + "/events"
    one = {"events": [{"value": "x"}]}
    # No, malformed or wrong credentials: 401 with a Basic challenge; a wrong password
    # waits as a failed SASL login does (connection.failed.authentication.delay.ms).
    for headers, wrong_password in (
        ({}, False),
        ({"Authorization": "Basic !!!"}, False),
        ({"Authorization": "Bearer x"}, False),
        (basic(ALICE, "wrong"), True),
        (basic("mallory", "pw"), True),
    ):
        started = time.monotonic()
        status, doc, got = api.call("GET", events, headers=headers)
        assert status == 401, (headers, doc)
        assert got["www-authenticate"].startswith("Basic")
        if wrong_password:
            assert time.monotonic() - started >= 0.09
    # alice may read, not write.
    status, doc, _ = api.call("POST", events, one, basic(ALICE, ALICE_PASSWORD))
    assert status == 403 and doc["error"] == "forbidden"
    status, doc, _ = api.call("GET", events, headers=basic(ALICE, ALICE_PASSWORD))
    assert status == 200 and doc["version_count"] == 0
    # The super user writes; alice then reads it; nothing else came of the refusals.
    status, doc, _ = api.call(
        "POST", events, one, {**basic(ADMIN, ADMIN_PASSWORD), "If-Match": '"0"'}
    )
    assert status == 201, doc
    status, doc, _ = api.call("GET", events, headers=basic(ALICE, ALICE_PASSWORD))
    assert [e["value"] for e in doc["events"]] == ["x"]
    # A topic alice has no ACL on: 403 for reads too.
    other = topic_name("es-sec-other")
    admin.create_topics([NewTopic(other, 1, 1, config=VERSIONED)])[other].result(30)
    status, doc, _ = api.call("GET", key_path(other, "k"), headers=basic(ALICE, ALICE_PASSWORD))
    assert status == 403
    # The Python API and the CLI take the same credentials.
    store = EventStore(api.broker.bootstrap, api.url, auth=(ALICE, ALICE_PASSWORD))
    assert [e.value for e in store.read(topic, "k")] == [b"x"]
    props = api.broker.data_dir.parent / "alice.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username={ALICE}\nsasl.password={ALICE_PASSWORD}\n"
    )
    done = chronik(
        "events",
        "read",
        topic,
        "k",
        "--http",
        api.url,
        "--bootstrap-server",
        f"127.0.0.1:{sasl_port}",
        "--command-config",
        str(props),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\tx\n"
    done = chronik(
        "events",
        "append",
        topic,
        "k",
        "--value",
        "y",
        "--http",
        api.url,
        "--bootstrap-server",
        f"127.0.0.1:{sasl_port}",
        "--command-config",
        str(props),
    )
    assert done.returncode == 1 and "may not WRITE" in done.stderr
