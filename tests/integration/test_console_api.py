"""The web console's JSON API (docs/console.md) against real `chronik serve` processes,
with data made by real clients (confluent-kafka producing, consuming and committing) and
answers compared with the CLI's (`chronik topics describe`, `chronik groups describe`):

- an open broker (HTTP listener on loopback, a schema registry): every endpoint, the page
  and its security headers, CSRF and Origin checks, paging and limits;
- a secured broker (SASL_PLAINTEXT with SCRAM, the ACL authorizer): login, a user who
  sees only what its ACLs let it describe, refusals, and no password in any answer or
  log line;
- a cluster of three brokers: the overview names them and the controller, messages of
  partitions led by other brokers are read through them, and aggregates they lead are
  appended through their HTTP listeners.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

from chronik.security.credentials import CredentialStore
from chronik.security.scram import make_credential
from conftest import BrokerProcess, free_port, wait_for_port

from .cli_support import chronik
from .cluster_support import Cluster
from .console_api_support import ConsoleClient, seg
from .helpers import wait_until

# -- the open broker ---------------------------------------------------------------------


class Open:
    def __init__(self, broker: BrokerProcess, port: int, registry: int) -> None:
        self.broker = broker
        self.port = port
        self.registry_url = f"http://127.0.0.1:{registry}"

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def client(self) -> ConsoleClient:
        c = ConsoleClient(self.port)
        c.session()
        return c

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Open]:
    port, registry = free_port(), free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("console-open") / "data",
        {
            "http.listen": f"127.0.0.1:{port}",
            "schema.registry.listen": f"127.0.0.1:{registry}",
            "console.messages.max.bytes": str(300_000),
        },
    )
    broker.start()
    wait_for_port(port, 30, proc=broker.proc)
    wait_for_port(registry, 30, proc=broker.proc)
    try:
        yield Open(broker, port, registry)
    finally:
        broker.kill()


def create(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=dict(config))])
    futures[name].result(30)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    for r in records:
        producer.produce(topic, **r)
    assert producer.flush(30) == 0


def cli_topic(bootstrap: str, name: str) -> dict[str, Any]:
    """`chronik topics describe NAME`, parsed."""
    result = chronik("topics", "describe", name, bootstrap=bootstrap)
    assert result.returncode == 0, result.stderr
    head = re.search(r"PartitionCount: (\d+)\tReplicationFactor: (\d+)", result.stdout)
    assert head is not None, result.stdout
    partitions = {}
    for m in re.finditer(
        r"Partition: (\d+)\tLeader: (\S+)\tReplicas: (\S*)\tIsr: (\S*)", result.stdout
    ):
        partitions[int(m.group(1))] = {
            "leader": int(m.group(2)) if m.group(2) != "none" else -1,
            "replicas": [int(x) for x in m.group(3).split(",") if x],
            "isr": [int(x) for x in m.group(4).split(",") if x],
        }
    return {"partitions": int(head.group(1)), "replication": int(head.group(2)),
            "rows": partitions}


def cli_group(bootstrap: str, group: str) -> tuple[str, list[dict[str, Any]]]:
    """`chronik groups describe G`: (state, rows by column name)."""
    result = chronik("groups", "describe", group, bootstrap=bootstrap)
    assert result.returncode == 0, result.stderr
    state = re.search(r"is (\w+) with", result.stderr)
    assert state is not None, result.stderr
    lines = result.stdout.splitlines()
    header = lines[0].split()
    return state.group(1), [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]


def test_page_static_files_and_headers(open_broker: Open) -> None:
    c = ConsoleClient(open_broker.port)
    status, body, headers = c.request("GET", "/console/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert isinstance(body, bytes) and b"<" in body
    assert headers["content-security-policy"] == (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'"
    )
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-cache"
    status, _, headers = c.request("GET", "/console")
    assert status == 308 and headers["location"] == "/console/"
    for bad in ("/console/static/../routes.py", "/console/static/..%2Froutes.py",
                "/console/static/%2e%2e/routes.py", "/console/static/.hidden.js",
                "/console/static/routes.py", "/console/static/nope.js",
                "/console/static/a/b.js"):
        status, body, headers = c.request("GET", bad)
        assert status == 404, bad
        assert headers["x-content-type-options"] == "nosniff"
    # The event store's API on the same listener is unchanged.
    status, body, _ = c.request("GET", "/v1/topics/none/keys/k")
    assert status == 404 and body["error"] == "unknown_topic"


def test_session_cookie_and_csrf(open_broker: Open) -> None:
    c = ConsoleClient(open_broker.port)
    status, doc, headers = c.request("GET", "/console/api/session")
    assert status == 200 and doc["secured"] is False and doc["principal"] is None
    cookie = headers["set-cookie"]
    assert cookie.startswith("chronik_console=")
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/console/"):
        assert attribute in cookie
    assert "Secure" not in cookie  # plain HTTP
    assert headers["cache-control"] == "no-store"
    c.csrf = doc["csrf"]
    assert len(c.csrf) >= 40 and c.session()["csrf"] == doc["csrf"]  # the same session
    name = f"csrf-{time.monotonic_ns()}"
    body = {"name": name, "partitions": 1}
    # No token, a wrong one, another origin: refused, nothing created.
    assert c.request("POST", "/console/api/topics", body, csrf=False)[0:2] == (
        403, {"error": "csrf", "message": "missing or wrong X-CSRF-Token"})
    status, doc, _ = c.request("POST", "/console/api/topics", body,
                               headers={"X-CSRF-Token": "x" * 43})
    assert (status, doc["error"]) == (403, "csrf")
    status, doc, _ = c.request("POST", "/console/api/topics", body,
                               headers={"Origin": "http://evil.example"})
    assert (status, doc["error"]) == (403, "csrf")
    # Without a cookie at all (another client): refused.
    stranger = ConsoleClient(open_broker.port)
    stranger.csrf = c.csrf
    assert stranger.request("POST", "/console/api/topics", body)[0] == 403
    assert name not in open_broker.admin().list_topics(timeout=10).topics
    status, doc, _ = c.request("POST", "/console/api/topics", body,
                               headers={"Origin": c.origin})
    assert (status, doc) == (201, {"name": name})
    # Logout ends the session: its token is no longer good.
    old = c.csrf
    c.api("POST", "logout")
    c.csrf = old
    assert c.request("DELETE", f"/console/api/topics/{name}")[0] == 403


def test_overview_and_topics_match_the_cli(open_broker: Open) -> None:
    admin = open_broker.admin()
    prefix = f"ov{time.monotonic_ns()}"
    create(admin, f"{prefix}-a", 3, **{"retention.ms": "3600000"})
    create(admin, f"{prefix}-b", 2)
    produce(open_broker.bootstrap, f"{prefix}-a",
            [{"key": f"k{i}", "value": f"v{i}", "partition": i % 3} for i in range(30)])
    c = open_broker.client()
    overview = c.get("overview")
    meta = admin.list_topics(timeout=10)
    assert [b["id"] for b in overview["brokers"]] == sorted(meta.brokers)
    assert overview["controller"] == meta.controller_id
    assert overview["cluster_id"] == meta.cluster_id
    assert overview["topics"] == len(meta.topics)
    assert overview["partitions"] == sum(len(t.partitions) for t in meta.topics.values())
    assert overview["brokers"][0]["leaders"] == overview["partitions"]
    assert overview["brokers"][0]["disk_bytes"] > 0
    assert overview["under_replicated"] == 0 and overview["offline"] == 0

    page = c.get("topics", q=prefix)
    assert page["total"] == 2
    a, b = page["items"]
    assert (a["name"], b["name"]) == (f"{prefix}-a", f"{prefix}-b")
    cli_a = cli_topic(open_broker.bootstrap, a["name"])
    assert (a["partitions"], a["replication_factor"]) == (cli_a["partitions"],
                                                          cli_a["replication"])
    assert a["messages"] == 30 and b["messages"] == 0
    assert a["retention_ms"] == "3600000"
    assert a["size_bytes"] > 0 and a["internal"] is False
    assert a["messages_per_sec"] is None  # the first look
    # Paging and the filter are the server's; internal topics only when asked for.
    assert c.get("topics", q=prefix, limit=1, offset=1)["items"][0]["name"] == b["name"]
    assert c.get("topics", q=prefix.upper())["total"] == 2
    everything = c.get("topics", limit=500, internal="true")
    assert "__consumer_offsets" in [t["name"] for t in everything["items"]] or not any(
        t.startswith("__") for t in meta.topics)
    assert all(not t["name"].startswith("__") for t in c.get("topics", limit=500)["items"])
    for bad in ({"limit": 501}, {"limit": 0}, {"offset": -1}, {"limit": "x"}):
        assert c.request("GET", "/console/api/topics", query=bad)[0] == 400

    detail = c.get(f"topics/{a['name']}")
    rows = {p["partition"]: p for p in detail["partitions"]}
    assert sorted(rows) == sorted(cli_a["rows"])
    for index, row in cli_a["rows"].items():
        assert rows[index]["leader"] == row["leader"]
        assert rows[index]["replicas"] == row["replicas"]
        assert rows[index]["isr"] == row["isr"]
        assert rows[index]["log_start_offset"] == 0
        assert rows[index]["log_end_offset"] == rows[index]["high_watermark"] == 10
    configs = {e["name"]: e for e in detail["configs"]}
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"

    # messages per second: from the change of the end offsets between two looks.
    time.sleep(1.1)
    produce(open_broker.bootstrap, a["name"], [{"value": b"x"} for _ in range(20)])
    rate = c.get("topics", q=f"{prefix}-a")["items"][0]["messages_per_sec"]
    assert rate is not None and rate > 0
    status, doc, _ = c.request("GET", "/console/api/topics/no-such-topic")
    assert (status, doc["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_create_alter_and_delete_topics(open_broker: Open) -> None:
    c = open_broker.client()
    admin = open_broker.admin()
    name = f"made-{time.monotonic_ns()}"
    created = c.api("POST", "topics", {"name": name, "partitions": 4, "replication_factor": 1,
                                       "configs": {"cleanup.policy": "compact"}})
    assert created == {"name": name}
    meta = admin.list_topics(name, timeout=10).topics[name]
    assert len(meta.partitions) == 4
    status, doc, _ = c.request("POST", "/console/api/topics", {"name": name, "partitions": 1})
    assert (status, doc["error"]) == (409, "TOPIC_ALREADY_EXISTS")
    status, doc, _ = c.request("POST", "/console/api/topics",
                               {"name": "bad/name", "partitions": 1})
    assert status == 400 and doc["error"].startswith("INVALID_")
    for bad in ({"partitions": 1}, {"name": 5}, {"name": "x", "partitions": "two"}):
        assert c.request("POST", "/console/api/topics", bad)[0] == 400
    status, _, _ = c.request("POST", "/console/api/topics", None)
    assert status == 400

    changed = c.api("PATCH", f"topics/{name}/configs",
                    {"set": {"retention.ms": "12345"}, "delete": ["cleanup.policy"]})
    shown = {e["name"]: e["value"] for e in changed["configs"]}
    assert shown["retention.ms"] == "12345" and shown["cleanup.policy"] == "delete"
    result = chronik("topics", "describe", name, bootstrap=open_broker.bootstrap)
    assert "retention.ms=12345" in result.stdout
    status, doc, _ = c.request("PATCH", f"/console/api/topics/{name}/configs",
                               {"set": {"retention.ms": "soon"}})
    assert status == 400 and doc["error"].startswith("INVALID_")

    assert c.api("DELETE", f"topics/{name}") == {"deleted": name}
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, "topic deleted", 30)
    status, doc, _ = c.request("DELETE", f"/console/api/topics/{name}")
    assert (status, doc["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")


def test_messages(open_broker: Open) -> None:
    admin = open_broker.admin()
    topic = f"msgs-{time.monotonic_ns()}"
    create(admin, topic, 2)
    base = 1_700_000_000_000
    records: list[dict[str, Any]] = []
    for i in range(40):
        value: bytes = f"plain {i}".encode()
        if i % 4 == 1:
            value = json.dumps({"n": i, "ok": True}).encode()
        elif i % 4 == 2:
            value = bytes([0xFF, 0xFE, i])
        records.append({"key": f"key-{i % 5}", "value": value, "partition": i % 2,
                        "timestamp": base + i * 1000, "headers": [("h", f"hv{i}".encode()),
                                                                  ("bin", b"\x80\x81")]})
    produce(open_broker.bootstrap, topic, records)
    c = open_broker.client()
    path = f"topics/{topic}/messages"

    page = c.get(path, partition=0, limit=5)
    assert [m["offset"] for m in page["items"]] == [0, 1, 2, 3, 4]
    assert page["next_offset"] == 5
    first = page["items"][0]
    assert (first["partition"], first["key"], first["value"]) == (0, "key-0", "plain 0")
    assert first["value_format"] == "text" and first["timestamp"] == base
    assert first["timestamp_type"] == "CreateTime"
    assert first["headers"] == [{"key": "h", "value": "hv0", "value_format": "text"},
                                {"key": "bin", "value": "8081", "value_format": "hex"}]
    assert page["items"][1]["value_format"] == "hex"  # record 2: \xff\xfe\x02
    assert page["items"][1]["value"] == "fffe02"
    nxt = c.get(path, partition=0, offset=page["next_offset"], limit=5)
    assert [m["offset"] for m in nxt["items"]] == [5, 6, 7, 8, 9]

    # Partition 1 holds the odd records: 1, 5, 9 ... are JSON, shown pretty.
    odd = c.get(path, partition=1, **{"from": "offset"}, offset=0, limit=2)
    assert odd["items"][0]["value_format"] == "json"
    assert json.loads(odd["items"][0]["value"]) == {"n": 1, "ok": True}
    assert "\n" in odd["items"][0]["value"]
    as_text = c.get(path, partition=1, offset=0, limit=1, format="text")["items"][0]
    assert as_text["value_format"] == "text" and json.loads(as_text["value"])["n"] == 1
    as_hex = c.get(path, partition=1, offset=0, limit=1, format="hex")["items"][0]
    assert bytes.fromhex(as_hex["value"]) == records[1]["value"]

    end = c.get(path, partition=0, **{"from": "end"}, limit=3)
    assert [m["offset"] for m in end["items"]] == [17, 18, 19]
    at = c.get(path, partition=0, **{"from": "timestamp"}, timestamp=base + 10_500, limit=1)
    assert at["items"][0]["offset"] == 6  # record 12, the first at or after
    keyed = c.get(path, key="key-3", limit=50)
    assert [m["key"] for m in keyed["items"]] == ["key-3"] * 8
    assert all(m["value"] != "" for m in keyed["items"])
    # Every partition: merged by timestamp.
    merged = c.get(path, limit=6)
    assert [m["timestamp"] for m in merged["items"]] == [base + i * 1000 for i in range(6)]
    assert merged["next_offset"] is None and merged["next_offsets"] == {"0": 3, "1": 3}
    assert c.get(path, **{"from": "end"}, limit=2)["items"][-1]["timestamp"] == base + 39_000

    for bad in ({"partition": 9}, {"from": "middle"}, {"format": "xml"}, {"limit": 1000},
                {"from": "timestamp"}, {"partition": "one"}):
        status, doc, _ = c.request("GET", f"/console/api/{path}", query=bad)
        assert status in (400, 404), (bad, status, doc)
    assert c.request("GET", "/console/api/topics/nope/messages")[0] == 404


def test_messages_read_a_bounded_number_of_bytes(open_broker: Open) -> None:
    topic = f"big-{time.monotonic_ns()}"
    create(open_broker.admin(), topic, 1)
    # 20 records of 60 kB (one batch each); the broker reads at most 300 kB per request.
    produce(open_broker.bootstrap, topic, [{"value": bytes([65 + i]) * 60_000}
                                           for i in range(20)], **{"linger.ms": 0})
    c = open_broker.client()
    offset, seen = 0, []
    for _ in range(20):
        page = c.get(f"topics/{topic}/messages", partition=0, offset=offset, limit=50)
        assert 0 < len(page["items"]) < 20
        seen.extend(m["offset"] for m in page["items"])
        offset = page["next_offset"]
        if offset >= 20:
            break
    assert seen == list(range(20))


def every_page(c: ConsoleClient, path: str, **query: Any) -> tuple[list[tuple[int, int]], int]:
    """Every record of every partition, page after page as the console's "Next page"
    goes on (offsets=P:N,... from each answer's next_offsets): ((partition, offset) in
    the order shown, the number of pages)."""
    seen: list[tuple[int, int]] = []
    going_on: dict[str, Any] = {}
    for pages in range(1, 500):
        page = c.get(path, **query, **going_on)
        assert page["next_offset"] is None
        seen.extend((m["partition"], m["offset"]) for m in page["items"])
        if page["at_end"]:
            return seen, pages
        going_on = {"offsets": ",".join(f"{p}:{n}" for p, n in page["next_offsets"].items())}
    raise AssertionError("no end after 500 pages")


def test_messages_go_on_over_all_partitions(open_broker: Open) -> None:
    topic = f"paged-{time.monotonic_ns()}"
    create(open_broker.admin(), topic, 3)
    base = 1_700_000_000_000
    # 3 x 150 records of 3 kB in small batches: over the broker's 300 kB a request reads.
    records = [{"key": f"k-{i % 7}", "value": bytes([48 + i % 10]) * 3000, "partition": i % 3,
                "timestamp": base + (i * 7919) % 450 * 10} for i in range(450)]
    placed: dict[tuple[int, int], str] = {}
    producer = Producer({"bootstrap.servers": open_broker.bootstrap, "batch.size": 16384,
                         "linger.ms": 5})
    for r in records:
        producer.produce(topic, on_delivery=lambda err, msg: placed.__setitem__(
            (msg.partition(), msg.offset()), msg.key().decode()), **r)
    assert producer.flush(30) == 0 and len(placed) == 450
    c = open_broker.client()
    path = f"topics/{topic}/messages"

    # Every record once, in pages of 40 merged by timestamp.
    seen, pages = every_page(c, path, limit=40)
    assert sorted(seen) == sorted(placed) and len(seen) == len(set(seen))
    assert pages >= 450 // 40
    # With a key filter every matching record once, though most pages read past others.
    seen, pages = every_page(c, path, limit=9, key="k-3")
    assert sorted(seen) == sorted(k for k, v in placed.items() if v == "k-3")
    assert len(seen) == len(set(seen)) and pages > 1
    # A partition not named goes as `from` says (the beginning unless told).
    page = c.get(path, limit=500, offsets="0:150,1:149")
    by_partition: dict[int, list[int]] = {}
    for m in page["items"]:
        by_partition.setdefault(m["partition"], []).append(m["offset"])
    assert by_partition[1] == [149] and by_partition[2][0] == 0 and 0 not in by_partition
    # An offset outside the log is clamped to it.
    page = c.get(path, limit=5, offsets="0:999999,1:999999,2:999999")
    assert page["items"] == [] and page["at_end"] is True
    assert page["next_offsets"] == {"0": 150, "1": 150, "2": 150}

    for bad in ("0:1,0:2", "3:0", "0:x", "0", "-1:0", "0:1,1:1,2:1,0:1", "0:1;1:1",
                ",".join(f"{p}:0" for p in range(4))):
        status, doc, _ = c.request("GET", f"/console/api/{path}", query={"offsets": bad})
        assert (status, doc["error"]) == (400, "bad_request"), (bad, doc)
    status, doc, _ = c.request("GET", f"/console/api/{path}",
                               query={"offsets": "0:1", "partition": 0})
    assert (status, doc["error"]) == (400, "bad_request"), doc


def test_groups_lag_reset_and_delete(open_broker: Open) -> None:
    admin = open_broker.admin()
    topic, group = f"g-{time.monotonic_ns()}", f"group-{time.monotonic_ns()}"
    create(admin, topic, 2)
    produce(open_broker.bootstrap, topic, [{"value": b"v", "partition": i % 2}
                                           for i in range(20)])
    consumer = Consumer({"bootstrap.servers": open_broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "client.id": "console-test"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 8 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
            if got in (4, 8):
                consumer.commit(msg, asynchronous=False)
    c = open_broker.client()
    try:
        wait_until(lambda: c.get(f"groups/{seg(group)}")["state"] == "Stable", "group stable", 30)
        detail = c.get(f"groups/{seg(group)}")
        state, rows = cli_group(open_broker.bootstrap, group)
        assert detail["state"] == state == "Stable"
        assert detail["protocol_type"] == "consumer" and detail["protocol"]
        assert len(detail["members"]) == 1
        member = detail["members"][0]
        assert member["client_id"] == "console-test"
        assert sorted((a["topic"], a["partition"]) for a in member["assignment"]) == [
            (topic, 0), (topic, 1)]
        by_key = {(r["topic"], r["partition"]): r for r in detail["offsets"]}
        for row in rows:
            mine = by_key[(row["TOPIC"], int(row["PARTITION"]))]
            assert str(mine["committed"] if mine["committed"] is not None else "-") == \
                row["CURRENT-OFFSET"]
            assert str(mine["log_end_offset"]) == row["LOG-END-OFFSET"]
            assert str(mine["lag"] if mine["lag"] is not None else "-") == row["LAG"]
            assert mine["member_id"] == row["CONSUMER-ID"]
        assert detail["total_lag"] == sum(r["lag"] or 0 for r in detail["offsets"])
        listed = c.get("groups", q=group)
        assert listed["total"] == 1
        assert listed["items"][0] == {"group_id": group, "state": "Stable",
                                      "protocol_type": "consumer", "members": 1,
                                      "lag": detail["total_lag"]}
        before = detail["total_lag"]
        # The lag moves when the consumer reads and commits on.
        while got < 20 and time.monotonic() < deadline + 30:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
        after = c.get(f"groups/{seg(group)}")["total_lag"]
        assert after < before and after == 0
        # An active group's offsets are not reset (the CLI's rule).
        status, doc, _ = c.request("POST", f"/console/api/groups/{seg(group)}/reset-offsets",
                                   {"topic": topic, "to": "earliest"})
        assert (status, doc["error"]) == (409, "NON_EMPTY_GROUP")
        status, doc, _ = c.request("DELETE", f"/console/api/groups/{seg(group)}")
        assert (status, doc["error"]) == (409, "NON_EMPTY_GROUP")
    finally:
        consumer.close()
    wait_until(lambda: c.get(f"groups/{seg(group)}")["state"] == "Empty", "group empty", 30)
    url = f"groups/{seg(group)}/reset-offsets"
    plan = c.api("POST", url, {"topic": topic, "to": "offset", "value": 3, "dry_run": True})
    assert plan == {"offsets": [{"topic": topic, "partition": 0, "from": 10, "to": 3},
                                {"topic": topic, "partition": 1, "from": 10, "to": 3}],
                    "applied": False}
    assert c.get(f"groups/{seg(group)}")["total_lag"] == 0  # a dry run changes nothing
    # As the CLI: an offset past the end is clamped to it.
    clamped = c.api("POST", url, {"topic": topic, "partitions": [1], "to": "offset",
                                  "value": 99, "dry_run": True})
    assert clamped["offsets"] == [{"topic": topic, "partition": 1, "from": 10, "to": 10}]
    done = c.api("POST", url, {"topic": topic, "partitions": [0], "to": "earliest"})
    assert done["applied"] is True
    _, rows = cli_group(open_broker.bootstrap, group)
    assert {int(r["PARTITION"]): r["CURRENT-OFFSET"] for r in rows} == {0: "0", 1: "10"}
    shifted = c.api("POST", url, {"topic": topic, "to": "shift", "value": -4})
    assert [(r["from"], r["to"]) for r in shifted["offsets"]] == [(0, 0), (10, 6)]
    latest = c.api("POST", url, {"topic": topic, "to": "latest"})
    assert [r["to"] for r in latest["offsets"]] == [10, 10]
    future = c.api("POST", url, {"topic": topic, "to": "timestamp",
                                 "value": int(time.time() * 1000) + 3_600_000, "dry_run": True})
    assert [r["to"] for r in future["offsets"]] == [10, 10]
    for bad in ({"topic": topic, "to": "sideways"}, {"topic": topic, "to": "offset"},
                {"to": "earliest"}, {"topic": topic, "to": "earliest", "partitions": [7]}):
        assert c.request("POST", f"/console/api/{url}", bad)[0] in (400, 404), bad
    assert c.api("DELETE", f"groups/{seg(group)}") == {"deleted": group}
    status, doc, _ = c.request("GET", f"/console/api/groups/{seg(group)}")
    assert (status, doc["error"]) == (404, "GROUP_ID_NOT_FOUND")


def test_aggregates(open_broker: Open) -> None:
    topic = f"acc-{time.monotonic_ns()}"
    create(open_broker.admin(), topic, 3, **{"key.versioning.enable": "true"})
    c = open_broker.client()
    url = f"aggregates/{topic}/{seg('account/7')}"
    empty = c.get(url)
    assert empty["version_count"] == 0 and empty["events"] == []
    written = c.api("POST", url, {"expected_version": 0,
                                  "events": [{"value": "opened"}, {"value": {"amount": 5}}]})
    assert (written["first_version"], written["last_version"]) == (0, 1)
    assert written["key"] == "account/7" and len(written["offsets"]) == 2
    status, doc, _ = c.request("POST", f"/console/api/{url}",
                               {"expected_version": 1, "events": [{"value": "late"}]})
    assert (status, doc["error"], doc["current_version"]) == (409, "version_conflict", 2)
    c.api("POST", url, {"expected_version": 2, "events": [{"value": "closed"}]})
    events = c.get(url)
    assert events["version_count"] == 3 and events["partition"] == written["partition"]
    assert [e["version"] for e in events["events"]] == [0, 1, 2]
    assert events["events"][0]["value"] == "opened"
    assert events["events"][1]["value_format"] == "json"
    assert json.loads(events["events"][1]["value"]) == {"amount": 5}
    assert c.get(url, from_version=2)["events"][0]["value"] == "closed"
    # The records are the event store's: a consumer reads them at those offsets.
    page = c.get(f"topics/{topic}/messages", partition=written["partition"], limit=5)
    assert [m["value"] for m in page["items"]][0] == "opened"
    plain = f"plain-{time.monotonic_ns()}"
    create(open_broker.admin(), plain, 1)
    status, doc, _ = c.request("GET", f"/console/api/aggregates/{plain}/k")
    assert (status, doc["error"]) == (409, "versioning_disabled")


def test_schemas_and_decoded_values(open_broker: Open) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    registry = SchemaRegistryClient({"url": open_broker.registry_url})
    subject = f"orders-{time.monotonic_ns()}-value"
    v1 = {"type": "object", "properties": {"id": {"type": "integer"}}}
    v2 = {"type": "object", "properties": {"id": {"type": "integer"},
                                            "note": {"type": "string"}}}
    first = registry.register_schema(subject, Schema(json.dumps(v1), "JSON"))
    registry.set_compatibility(subject_name=subject, level="FORWARD")
    registry.register_schema(subject, Schema(json.dumps(v2), "JSON"))
    c = open_broker.client()
    listed = c.get("schemas", q=subject)
    assert listed["total"] == 1
    item = listed["items"][0]
    assert item["subject"] == subject and item["versions"] == [1, 2]
    assert item["type"] == "JSON" and item["compatibility"] == "FORWARD"
    one = c.get(f"schemas/{seg(subject)}/versions/1")
    assert one["id"] == first and json.loads(one["schema"]) == v1 and "\n" in one["schema"]
    diff = c.get(f"schemas/{seg(subject)}/diff", **{"from": 1, "to": 2})
    added = [line["text"] for line in diff["lines"] if line["op"] == "+"]
    assert any('"note"' in text for text in added)
    assert all(line["op"] in (" ", "+", "-") for line in diff["lines"])
    assert c.get(f"schemas/{seg(subject)}/compatibility")["compatibility"] == "FORWARD"
    assert c.request("GET", f"/console/api/schemas/{seg(subject)}/versions/9")[0] == 404
    assert c.request("GET", "/console/api/schemas/nope/compatibility")[0] == 404

    topic = f"framed-{time.monotonic_ns()}"
    create(open_broker.admin(), topic, 1)
    framed = b"\x00" + first.to_bytes(4, "big") + json.dumps({"id": 42}).encode()
    produce(open_broker.bootstrap, topic, [{"value": framed}])
    shown = c.get(f"topics/{topic}/messages", partition=0)["items"][0]
    assert shown["value_format"] == "schema" and shown["schema_id"] == first
    assert json.loads(shown["value"]) == {"id": 42}
    raw = c.get(f"topics/{topic}/messages", partition=0, format="hex")["items"][0]
    assert bytes.fromhex(raw["value"]) == framed and raw["schema_id"] is None


def test_acls_and_users_on_an_open_broker(open_broker: Open) -> None:
    c = open_broker.client()
    assert c.get("acls") == {"secured": False, "total": 0, "items": []}
    assert c.get("users") == {"secured": False, "total": 0, "items": []}
    assert c.request("GET", "/console/api/nothing")[0] == 404
    assert c.request("PUT", "/console/api/overview", {})[0] == 405


# -- a secured broker --------------------------------------------------------------------

USERS = {"admin": "admin-Pa55-console", "alice": "alice-S3cret-console",
         "bob": "bob-Hidden-Pw-9"}


class Secured:
    def __init__(self, broker: BrokerProcess, port: int) -> None:
        self.broker = broker
        self.port = port

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(client_conf(self.broker.bootstrap, user))


def client_conf(bootstrap: str, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("console-secured") / "data"
    store = CredentialStore(data)
    for user, password in USERS.items():
        store.upsert(user, "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", password, 4096))
    port = free_port()
    broker = BrokerProcess(data)
    broker.config.update({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker.port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "chronik",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "10",
        "http.listen": f"127.0.0.1:{port}",
    })
    broker.start()
    wait_for_port(port, 30, proc=broker.proc)
    try:
        yield Secured(broker, port)
    finally:
        broker.kill()
        log = broker.log_text()
        assert not [p for p in USERS.values() if p in log], "a password reached the log"


def test_secured_console(secured: Secured) -> None:
    admin = secured.admin()
    for name in ("visible", "hidden"):
        create(admin, name, 2)
    produce(secured.broker.bootstrap, "hidden", [{"value": b"secret", "partition": 0}],
            **client_conf(secured.broker.bootstrap, "admin"))
    grants = [AclBinding(ResourceType.TOPIC, "visible", ResourcePatternType.LITERAL,
                         "User:alice", "*", op, AclPermissionType.ALLOW)
              for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    for future in admin.create_acls(grants, request_timeout=15).values():
        future.result()

    c = ConsoleClient(secured.port)
    status, doc, headers = c.request("GET", "/console/api/session")
    assert doc == {"secured": True, "principal": None, "csrf": None}
    assert "set-cookie" not in headers
    for path in ("overview", "topics", "groups", "acls", "users", "topics/visible/messages"):
        status, doc, _ = c.request("GET", f"/console/api/{path}")
        assert (status, doc["error"]) == (401, "unauthorized"), path
    # Login: a wrong password and an unknown user are 401; a login from another origin 403.
    assert c.login("alice", "wrong-password")[0] == 401
    assert c.login("mallory", "whatever")[0] == 401
    status, doc, _ = c.request("POST", "/console/api/login",
                               {"username": "alice", "password": USERS["alice"]},
                               headers={"Origin": "http://evil.example"})
    assert (status, doc["error"]) == (403, "csrf")
    status, doc = c.login("alice", USERS["alice"])
    assert status == 200 and doc["principal"] == "User:alice" and doc["csrf"]
    assert c.get("session")["principal"] == "User:alice"

    names = [t["name"] for t in c.get("topics", limit=500)["items"]]
    assert names == ["visible"]
    overview = c.get("overview")
    assert overview["topics"] == 1 and overview["partitions"] == 2
    assert overview["brokers"][0]["disk_bytes"] is None  # no DESCRIBE on the cluster
    for path, query in (("topics/hidden/messages", None),
                        ("topics/hidden/messages", {"partition": 0}), ("topics/hidden", None)):
        status, doc, _ = c.request("GET", f"/console/api/{path}", query=query)
        assert (status, doc["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED"), path
    assert c.get("topics/visible/messages")["items"] == []
    for path in ("acls", "users"):
        status, doc, _ = c.request("GET", f"/console/api/{path}")
        assert (status, doc["error"]) == (403, "CLUSTER_AUTHORIZATION_FAILED"), path
    # A write alice may not make: refused by the broker's ACLs, as over Kafka.
    status, doc, _ = c.request("POST", "/console/api/topics", {"name": "alices", "partitions": 1})
    assert (status, doc["error"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    status, doc, _ = c.request("POST", "/console/api/topics",
                               {"name": "alices", "partitions": 1}, csrf=False)
    assert (status, doc["error"]) == (403, "csrf")
    status, doc, _ = c.request("DELETE", "/console/api/topics/visible",
                               headers={"Origin": "http://evil.example"})
    assert (status, doc["error"]) == (403, "csrf")
    assert "visible" in admin.list_topics(timeout=10).topics

    boss = ConsoleClient(secured.port)
    assert boss.login("admin", USERS["admin"])[0] == 200
    assert {t["name"] for t in boss.get("topics")["items"]} >= {"visible", "hidden"}
    assert boss.get("overview")["brokers"][0]["disk_bytes"] > 0
    acls = boss.get("acls", principal="User:alice")
    assert acls["secured"] is True
    assert sorted(a["operation"] for a in acls["items"]) == ["DESCRIBE", "READ"]
    assert {a["resource_name"] for a in acls["items"]} == {"visible"}
    users = {u["user"]: u for u in boss.get("users")["items"]}
    assert set(users) == set(USERS)
    assert users["bob"]["mechanisms"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    hidden = boss.get("topics/hidden/messages", partition=0)["items"]
    assert [m["value"] for m in hidden] == ["secret"]

    # Logout: the session is gone.
    c.api("POST", "logout")
    assert c.request("GET", "/console/api/topics")[0] == 401
    for client in (c, boss):
        for data in client.seen:
            for password in USERS.values():
                assert password.encode() not in data


# -- a cluster of three brokers ------------------------------------------------------------


@pytest.fixture(scope="module")
def console_cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[tuple[Cluster, dict[int, int]]]:
    """Three brokers (as the cluster3 fixture) each with the console on its HTTP port."""
    cluster = Cluster(tmp_path_factory.mktemp("console-cluster"), zookeeper.connect, 3,
                      {"console.request.timeout.ms": "3000"})
    ports = {}
    for i in cluster.ids:
        ports[i] = free_port()
        cluster.broker(i).config["http.listen"] = f"127.0.0.1:{ports[i]}"
    try:
        cluster.start()
        for port in ports.values():
            wait_for_port(port, 30)
        yield cluster, ports
    finally:
        cluster.close()


def test_cluster_overview_and_remote_leaders(
    console_cluster: tuple[Cluster, dict[int, int]], tmp_path: Path
) -> None:
    cluster, ports = console_cluster
    c = ConsoleClient(ports[1])
    c.session()
    overview = c.get("overview")
    assert [b["id"] for b in overview["brokers"]] == [1, 2, 3]
    assert overview["controller"] == cluster.controller_id()
    assert all(b["disk_bytes"] is not None for b in overview["brokers"])
    topic = f"spread-{time.monotonic_ns()}"
    c.api("POST", "topics", {"name": topic, "partitions": 6, "replication_factor": 2})
    cluster.wait_topic(topic, 6)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(6):
        producer.produce(topic, value=f"p{p}".encode(), key=b"k", partition=p)
    assert producer.flush(30) == 0
    detail = c.get(f"topics/{topic}")
    cli = cli_topic(cluster.broker(1).bootstrap, topic)
    for row in detail["partitions"]:
        assert row["leader"] == cli["rows"][row["partition"]]["leader"]
        assert sorted(row["replicas"]) == sorted(cli["rows"][row["partition"]]["replicas"])
        assert row["high_watermark"] == 1
    remote = [r["partition"] for r in detail["partitions"] if r["leader"] != 1]
    assert remote, "every partition led by broker 1"
    for p in remote:
        items = c.get(f"topics/{topic}/messages", partition=p)["items"]
        assert [m["value"] for m in items] == [f"p{p}"]
    merged = c.get(f"topics/{topic}/messages", limit=50)
    assert sorted(m["value"] for m in merged["items"]) == [f"p{p}" for p in range(6)]
    overview = c.get("overview")
    assert overview["partitions"] >= 6 + 0
    assert sum(b["leaders"] for b in overview["brokers"]) == overview["partitions"]

    # A broker that does not answer: 503 within the console's timeout, not a hung page.
    led_by = {r["partition"]: r["leader"] for r in detail["partitions"]}
    stopped = next(b for b in (2, 3) if b in led_by.values())
    proc = cluster.broker(stopped).proc
    assert proc is not None
    import signal

    proc.send_signal(signal.SIGSTOP)
    try:
        partition = next(p for p, b in led_by.items() if b == stopped)
        started = time.monotonic()
        status, doc, _ = c.request("GET", f"/console/api/topics/{topic}/messages",
                                   query={"partition": partition})
        took = time.monotonic() - started
        assert status == 503, doc
        assert took < 20, took
    finally:
        proc.send_signal(signal.SIGCONT)
    wait_until(lambda: c.request("GET", f"/console/api/topics/{topic}/messages",
                                 query={"partition": partition})[0] == 200,
               "broker back", 60)
    # An aggregate whose partition another broker leads: appended there, through the
    # leader's HTTP listener (test_console_cluster.py goes further).
    events = f"ev-{topic}"
    c.api("POST", "topics", {"name": events, "partitions": 6, "replication_factor": 2,
                             "configs": {"key.versioning.enable": "true"}})
    cluster.wait_topic(events, 6)
    led = {r["partition"]: r["leader"] for r in c.get(f"topics/{events}")["partitions"]}
    leaders_seen = set()
    for n in range(12):
        status, doc, _ = c.request("POST", f"/console/api/aggregates/{events}/key-{n}",
                                   {"expected_version": 0, "events": [{"value": "x"}]})
        assert status == 201, doc
        leaders_seen.add(led[doc["partition"]])
    assert leaders_seen - {1}, leaders_seen
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"cg-{topic}",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    group = c.get(f"groups/cg-{topic}")
    state, rows = cli_group(cluster.broker(1).bootstrap, f"cg-{topic}")
    assert group["state"] == state == "Empty"
    assert [(r["topic"], r["partition"], r["committed"]) for r in group["offsets"]] == [
        (topic, 0, 1)]
    assert rows[0]["CURRENT-OFFSET"] == "1"


# -- switching it on and off -------------------------------------------------------------


def test_console_switched_off_and_refusing_to_start(tmp_path: Path) -> None:
    port = free_port()
    off = BrokerProcess(tmp_path / "off", {"http.listen": f"127.0.0.1:{port}",
                                           "console.enable": "false"})
    off.start()
    try:
        wait_for_port(port, 30, proc=off.proc)
        c = ConsoleClient(port)
        assert c.request("GET", "/console/")[0] == 404
        assert c.request("GET", "/console/api/session")[0] == 404
        status, doc, _ = c.request("GET", "/v1/topics/none/keys/k")
        assert (status, doc["error"]) == (404, "unknown_topic")  # the event store still is
    finally:
        off.kill()
    # Asked for explicitly on a secured broker without a SASL listener: one clear line.
    refused = BrokerProcess(tmp_path / "refused", {
        "http.listen": f"127.0.0.1:{free_port()}", "console.enable": "true",
        "authorizer.class.name": "chronik", "super.users": "User:admin",
    })
    refused.start(wait=False)
    assert refused.proc is not None
    assert refused.proc.wait(60) != 0
    errors = [line for line in refused.log_text().splitlines() if "chronik: error:" in line]
    assert len(errors) == 1 and "no listener takes SASL" in errors[0], refused.log_text()


def test_console_over_https_and_sasl_ssl(tmp_path: Path) -> None:
    """A broker whose only listener is SASL_SSL, its HTTP listener HTTPS: the console's
    cookie is Secure, and its Kafka connections trust the broker's own trust store."""
    import ssl

    from .tls_support import make_pki

    pki = make_pki(tmp_path / "pki")
    pem = pki.issue("broker", "localhost", server=True)
    data = tmp_path / "data"
    store = CredentialStore(data)
    store.upsert("alice", "SCRAM-SHA-512",
                 make_credential("SCRAM-SHA-512", USERS["alice"], 4096))
    port = free_port()
    broker = BrokerProcess(data)
    broker.config.update({
        "listeners": f"SASL_SSL://127.0.0.1:{broker.port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "http.listen": f"https://127.0.0.1:{port}",
    })
    broker.start()
    try:
        wait_for_port(port, 30, proc=broker.proc)
        c = ConsoleClient(port, tls=ssl.create_default_context(cafile=str(pki.ca_file)))
        status, doc, headers = c.request(
            "POST", "/console/api/login", {"username": "alice", "password": USERS["alice"]},
            headers={"Origin": c.origin})
        assert status == 200 and doc["principal"] == "User:alice", doc
        assert headers["set-cookie"].endswith("; Secure")
        c.csrf = doc["csrf"]
        name = f"tls-{time.monotonic_ns()}"
        assert c.api("POST", "topics", {"name": name, "partitions": 2}) == {"name": name}
        overview = c.get("overview")
        assert overview["brokers"][0]["port"] == broker.port and overview["topics"] >= 1
        assert c.get(f"topics/{name}")["partitions"][1]["leader"] == overview["brokers"][0]["id"]
        status, doc, _ = c.request("POST", "/console/api/topics", {"name": "x"},
                                   headers={"Origin": f"http://127.0.0.1:{port}"})
        assert (status, doc["error"]) == (403, "csrf")  # http:// is another origin
    finally:
        broker.kill()
    assert USERS["alice"] not in broker.log_text()


def test_sessions_of_one_principal_share_metadata(open_broker: Open) -> None:
    topic = f"shared-{time.monotonic_ns()}"
    create(open_broker.admin(), topic, 2)
    first, second = open_broker.client(), open_broker.client()
    assert first.csrf != second.csrf
    first.get("overview")  # Metadata of every topic, kept a second for ANONYMOUS
    # A test before this one may have had it kept just before the topic was created.
    wait_until(lambda: first.get("topics", q=topic)["items"], f"{topic} in the kept Metadata")
    # The second session's pages use it, and reach the leaders it names.
    page = second.get("topics", q=topic)
    assert page["items"][0]["messages"] == 0
    assert second.get(f"topics/{topic}/messages", partition=1)["items"] == []
