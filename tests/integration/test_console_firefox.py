"""The web console in Debian's Firefox ESR (headless, driven over WebDriver BiDi by
puppeteer-core: firefox_support.py) against `chronik serve` processes, with data made by
confluent-kafka, the event store's Python API and the schema registry client. Every page
(overview, topics, a topic, messages by key, groups, a group, an aggregate, schemas; a
secured broker's login) loads with no script error and no Content-Security-Policy
violation and shows the figures the chromium tests (test_console_browser.py) check
against the Kafka protocol and the CLI; a topic is created from the page with the
session's CSRF token. Screenshots go to test-artifacts/console/firefox-*.png.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from chronik.eventstore import EventStore

from .browser_support import (
    USERS,
    Console,
    Secured,
    cli_group_rows,
    consume,
    describe_partitions,
    open_console,
    secured_console,
)
from .firefox_support import Firefox, FirefoxPage, cell, firefox, require_firefox, row, t
from .helpers import BASE_TS, create_topic, topic_name, wait_until
from .registry_support import avro_record

LIVE = 20.0  # seconds: a few 3 s refreshes on a loaded machine
# The browser's time zone: not UTC, so that the page's local times are seen to be local.
TZ = "Asia/Kolkata"


@pytest.fixture(scope="module")
def browser() -> Iterator[Firefox]:
    with firefox(TZ) as b:
        yield b


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    require_firefox()
    with open_console(tmp_path_factory) as c:
        yield c


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    require_firefox()
    with secured_console(tmp_path_factory) as s:
        yield s


@pytest.fixture
def ui(browser: Firefox, console: Console) -> Iterator[FirefoxPage]:
    page = FirefoxPage(browser, console.url)
    yield page
    errors = page.errors
    page.close()
    assert errors == [], errors


# -- overview, topics, a topic ------------------------------------------------------------


def test_overview(ui: FirefoxPage, console: Console) -> None:
    topic = topic_name("ff-overview")
    create_topic(console.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": console.bootstrap})
    for i in range(20):
        producer.produce(topic, value=b"v" * 200, partition=i % 3)
    assert producer.flush(30) == 0
    response = ui.open("overview")
    assert response["status"] == 200, response
    policy = response["headers"].get("content-security-policy", "")
    assert "script-src 'self'" in policy or "default-src 'self'" in policy, policy
    ui.wait_visible(t("page-overview"))
    md = AdminClient({"bootstrap.servers": console.bootstrap}).list_topics(timeout=10)
    partitions = sum(len(tp.partitions) for tp in md.topics.values())
    ui.wait_text(t("stat-brokers"), str(len(md.brokers)))
    ui.wait_text(t("stat-controller"), str(md.controller_id))
    ui.wait_text(t("stat-offline"), "0")
    ui.wait_text(t("stat-under-replicated"), "0")
    ui.wait_text(t("stat-partitions"), str(partitions), timeout=LIVE)
    (broker_id,) = md.brokers
    ui.wait_text(cell("brokers-table", broker_id, "host"), console.bootstrap)
    ui.wait_text(cell("brokers-table", broker_id, "leaders"), str(partitions))
    # Disk use is asked less often than the page refreshes (overview.DISK_TTL).
    disk = cell("brokers-table", broker_id, "disk_bytes")
    ui.wait("disk use", lambda: int((ui.attr(disk, "title") or "0").split()[0]) > 0, LIVE)
    ui.shot("overview")


def test_firefox_reports_a_script_error_and_a_csp_violation(
    browser: Firefox, console: Console
) -> None:
    # What the other tests' "no error" rests on: this Firefox does report them. (After
    # the overview test: its disk figure is asked at most every 10 s.)
    assert browser.version.startswith("firefox/"), browser.version
    page = FirefoxPage(browser, console.url)
    try:
        page.open("overview")
        page.wait_visible(t("page-overview"))
        assert page.errors == []
        page.eval(
            """() => {
                const s = document.createElement("script");
                s.textContent = "window.__inline = 1";
                document.body.append(s);
                setTimeout(() => { throw new Error("thrown on purpose"); });
            }"""
        )
        errors = page.wait("two errors", lambda: len(page.errors) >= 2 and page.errors)
        assert any("thrown on purpose" in e for e in errors), errors
        assert any("Content-Security-Policy" in e or "CSP" in e for e in errors), errors
        assert page.eval("() => window.__inline === undefined")
    finally:
        page.close()


def test_topics_and_a_topic(ui: FirefoxPage, console: Console) -> None:
    prefix = topic_name("ff-topics")
    big, small = f"{prefix}-big", f"{prefix}-small"
    create_topic(console.bootstrap, big, 3, **{"retention.ms": "3600000"})
    create_topic(console.bootstrap, small, 1)
    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(30):
        producer.produce(big, key=f"k{i}".encode(), value=b"x" * 100, partition=i % 3)
    for i in range(5):
        producer.produce(small, value=f"v{i}".encode())
    assert producer.flush(30) == 0

    ui.open("topics")
    ui.fill(t("topic-filter"), prefix)
    ui.wait_count(f"{t('topics-table')} tbody tr[data-key]", 2)
    assert ui.keys("topics-table") == [big, small]
    ui.wait_text(cell("topics-table", big, "partitions"), "3")
    ui.wait_text(cell("topics-table", big, "replication_factor"), "1")
    ui.wait_text(cell("topics-table", big, "messages"), "30")
    ui.wait_text(cell("topics-table", small, "messages"), "5")
    ui.wait_text(cell("topics-table", big, "retention_ms"), "1 h")
    size = ui.attr(cell("topics-table", big, "size_bytes"), "title")
    assert size is not None and int(size.split()[0]) >= 3000
    ui.wait_text(t("pager-info"), "1–2 of 2")
    ui.wait_text(cell("topics-table", big, "messages_per_sec"), re.compile(r"^\d"), LIVE)
    ui.shot("topics")

    # The topic's partitions as `chronik topics describe` and the watermarks say.
    described = describe_partitions(console.bootstrap, big)
    ui.route("topics/" + big)
    ui.wait_count(f"{t('partitions-table')} tbody tr[data-key]", 3)
    consumer = Consumer({"bootstrap.servers": console.bootstrap, "group.id": "ff-watermarks"})
    try:
        for p, (leader, replicas, isr) in described.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(big, p), timeout=10)
            ui.wait_text(cell("partitions-table", p, "leader"), leader)
            ui.wait_text(cell("partitions-table", p, "replicas"), replicas)
            ui.wait_text(cell("partitions-table", p, "isr"), isr)
            ui.wait_text(cell("partitions-table", p, "log_start_offset"), str(low))
            ui.wait_text(cell("partitions-table", p, "log_end_offset"), str(high))
            ui.wait_text(cell("partitions-table", p, "high_watermark"), str(high))
    finally:
        consumer.close()
    ui.wait_text(cell("configs-table", "retention.ms", "value"), "3600000")
    ui.shot("topic")


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return entries[name].value if name in entries else None


def test_create_a_topic_from_the_page(ui: FirefoxPage, console: Console) -> None:
    admin = AdminClient({"bootstrap.servers": console.bootstrap})
    ui.open("topics")
    ui.wait_visible(t("page-topics"))
    # Without the session's token the write is refused...
    refused = topic_name("ff-refused")
    body = {"name": refused, "partitions": 1, "replication_factor": 1, "configs": {}}
    got = ui.fetch("POST", "topics", body)
    assert got["status"] == 403 and got["body"]["error"] == "csrf", got
    # ...the page's own form sends it.
    name = topic_name("ff-made")
    ui.fill(t("topic-create-name"), name)
    ui.fill(t("topic-create-partitions"), "2")
    ui.fill(t("topic-create-configs"), "cleanup.policy=compact\n")
    ui.click(t("topic-create-submit"))
    ui.wait_text(t("topic-create-result"), "created " + name)
    wait_until(
        lambda: (
            name in admin.list_topics(timeout=10).topics
            and len(admin.list_topics(name, timeout=10).topics[name].partitions) == 2
        ),
        f"{name} with 2 partitions",
    )
    assert topic_config(console.bootstrap, name, "cleanup.policy") == "compact"
    assert refused not in admin.list_topics(timeout=10).topics
    ui.fill(t("topic-filter"), name)
    ui.wait_count(f"{t('topics-table')} tbody tr[data-key]", 1)
    ui.wait_text(cell("topics-table", name, "partitions"), "2")
    ui.shot("topic-created")


# -- the message browser --------------------------------------------------------------------

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def test_messages_by_key(ui: FirefoxPage, console: Console) -> None:
    topic = topic_name("ff-msgs")
    create_topic(console.bootstrap, topic, 2)
    placed: dict[tuple[int, int], bytes | None] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        placed[(msg.partition(), msg.offset())] = msg.key()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(40):
        producer.produce(
            topic,
            key=f"user-{i % 5}".encode(),
            value=json.dumps({"n": i, "user": f"user-{i % 5}"}).encode(),
            partition=i % 2,
            headers=[("trace", f"t-{i}".encode())],
            timestamp=BASE_TS + i * 1000,
            on_delivery=delivered,
        )
    producer.produce(
        topic, key=b"hostile", value=HOSTILE.encode(), partition=0, on_delivery=delivered
    )
    assert producer.flush(30) == 0

    ui.open(f"topics/{topic}/messages")
    ui.wait_count(f"{t('msg-partition')} option", 3)

    def load(
        key: str = "",
        fmt: str = "text",
        partition: str = "",
        start: str = "beginning",
        at: str = "",
    ) -> None:
        ui.select(t("msg-partition"), partition)
        ui.select(t("msg-from"), start)
        if start == "timestamp":
            ui.fill(t("msg-timestamp"), at)
        ui.fill(t("msg-limit"), "100" if key else "2")
        ui.fill(t("msg-key"), key)
        ui.select(t("msg-format"), fmt)
        ui.eval("s => { document.querySelector(s).textContent = ''; }", t("msg-status"))
        ui.click(t("msg-load"))
        ui.wait_text(t("msg-status"), "record", contains=True)

    load("user-3")
    wanted = sorted(f"{p}:{o}" for (p, o), k in placed.items() if k == b"user-3")
    assert len(wanted) == 8
    assert sorted(ui.keys("messages-table")) == wanted
    ui.wait_text(t("msg-status"), "partitions go on at 0: ", contains=True)
    for key in wanted:
        ui.wait_text(cell("messages-table", key, "key"), "user-3")
        ui.wait_text(cell("messages-table", key, "headers"), "trace", contains=True)
    # JSON values parsed and pretty-printed.
    load("user-3", fmt="json")
    ui.wait_text(cell("messages-table", wanted[0], "value"), '"user": "user-3"', contains=True)
    ui.shot("messages")

    # From a timestamp as the table shows it (local time, which Firefox's Date.parse reads
    # back) and as ISO 8601 UTC: the first record at or after it.
    shown = ui.text(cell("messages-table", "1:6", "timestamp"))
    stamped = BASE_TS + 13_000  # record 13: partition 1, offset 6
    local = datetime.fromtimestamp(stamped / 1000, ZoneInfo(TZ))
    assert shown == local.strftime("%Y-%m-%d %H:%M:%S.000"), shown
    load(partition="1", start="timestamp", at=shown)
    assert ui.keys("messages-table") == ["1:6", "1:7"]
    # Record 21 (partition 1, offset 10) was stamped BASE_TS + 21 s.
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((BASE_TS + 21_000) / 1000))
    load(partition="1", start="timestamp", at=iso)
    assert ui.keys("messages-table") == ["1:10", "1:11"]

    # A record's markup is shown as text, never run.
    load("hostile")
    (hostile,) = ui.keys("messages-table")
    ui.wait_text(cell("messages-table", hostile, "value"), HOSTILE, contains=True)
    assert ui.eval("() => window.__pwned === undefined")
    assert ui.count(f"{t('messages-table')} img, {t('messages-table')} script") == 0


# -- consumer groups ------------------------------------------------------------------------


def test_groups_and_a_group(ui: FirefoxPage, console: Console) -> None:
    topic = topic_name("ff-lag")
    group = "ff-group-" + uuid.uuid4().hex[:8]
    create_topic(console.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": console.bootstrap,
            "group.id": group,
            "client.id": "ff-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    key = f"{topic}:0"
    try:
        consume(consumer, 30)
        ui.open(f"groups/{group}")
        ui.wait_text(t("group-total-lag"), "70", LIVE)
        ui.wait_text(t("group-state"), "Stable")
        ui.wait_text(cell("offsets-table", key, "committed"), "30")
        ui.wait_text(cell("offsets-table", key, "log_end_offset"), "100")
        ui.wait_count(f"{t('members-table')} tbody tr[data-key]", 1)
        (member,) = ui.keys("members-table")
        ui.wait_text(cell("members-table", member, "client_id"), "ff-reader")
        ui.wait_text(cell("members-table", member, "assignment"), f"{topic}-0")
        cli = cli_group_rows(console.bootstrap, group)[(topic, 0)]
        assert (cli["CURRENT-OFFSET"], cli["LOG-END-OFFSET"], cli["LAG"]) == ("30", "100", "70")
        assert cli["CONSUMER-ID"] == member
        ui.wait_text(cell("offsets-table", key, "member_id"), member)
        ui.shot("group")
        # The open page follows the consumer's progress without a reload.
        ui.eval("() => { window.__sameDocument = true; }")
        consume(consumer, 20)
        ui.wait_text(t("group-total-lag"), "50", LIVE)
        assert ui.eval("() => window.__sameDocument === true")
    finally:
        consumer.close()

    ui.route("groups")
    ui.fill(t("group-filter"), group)
    ui.wait_count(f"{t('groups-table')} tbody tr[data-key]", 1)
    ui.wait_text(cell("groups-table", group, "lag"), "50")
    ui.wait_text(cell("groups-table", group, "state"), "Empty", LIVE)
    ui.shot("groups")


# -- aggregates and schemas -----------------------------------------------------------------


def test_an_aggregate_and_an_append(ui: FirefoxPage, console: Console) -> None:
    topic = topic_name("ff-agg")
    create_topic(console.bootstrap, topic, 2, **{"key.versioning.enable": "true"})
    store = EventStore(console.bootstrap, console.url)
    store.append(topic, "acct-1", ["opened", {"amount": 5}], expected_version=0)

    ui.open(f"aggregates?topic={topic}&key=acct-1")
    ui.wait_text(t("agg-version-count"), "2")
    assert ui.keys("events-table") == ["0", "1"]
    ui.wait_text(cell("events-table", 0, "value"), "opened", contains=True)
    ui.wait_text(cell("events-table", 1, "value"), '"amount"', contains=True)
    assert ui.eval("s => document.querySelector(s).value", t("agg-expected")) == "2"
    ui.fill(t("agg-value"), '{"amount": 7}')
    ui.click(t("agg-append"))
    ui.wait_text(t("agg-version-count"), "3")
    assert ui.keys("events-table") == ["0", "1", "2"]
    assert [e.value for e in store.read(topic, "acct-1")][2] == b'{"amount": 7}'
    ui.shot("aggregate")


def test_schemas(ui: FirefoxPage, console: Console) -> None:
    client = SchemaRegistryClient({"url": console.registry})
    subject = topic_name("ff-pay") + "-value"
    v1 = avro_record("Payment", ("amount", "long"))
    v2 = avro_record("Payment", ("amount", "long"), ("currency", "string", "EUR"))
    client.register_schema(subject, Schema(v1, "AVRO"))
    latest_id = client.register_schema(subject, Schema(v2, "AVRO"))

    ui.open(f"schemas?subject={subject}")
    ui.fill(t("schema-filter"), subject)
    ui.wait_count(f"{t('schemas-table')} tbody tr[data-key]", 1)
    ui.wait_text(cell("schemas-table", subject, "versions"), "1, 2")
    ui.wait_text(cell("schemas-table", subject, "latest_id"), str(latest_id))
    ui.wait_text(cell("schemas-table", subject, "type"), "AVRO")
    ui.wait_text(t("schema-subject"), subject)
    ui.wait_text(t("schema-text"), '"currency"', contains=True)
    ui.wait(
        "the diff adds currency",
        lambda: ui.eval(
            "s => [...document.querySelectorAll(s + ' .add')]"
            ".some(n => n.textContent.includes('\"currency\"'))",
            t("schema-diff"),
        ),
    )
    ui.wait_text(t("schema-compat"), client.get_compatibility())
    ui.shot("schemas")


# -- a secured broker -----------------------------------------------------------------------


def test_login_on_a_secured_broker(browser: Firefox, secured: Secured) -> None:
    admin = secured.admin()
    prefix = topic_name("ff-sec")
    shown, hidden = f"{prefix}-shown", f"{prefix}-hidden"
    for name in (shown, hidden):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    acl = AclBinding(
        ResourceType.TOPIC,
        shown,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([acl], request_timeout=10).values():
        future.result()

    ui = FirefoxPage(browser, secured.url)
    try:
        ui.open("topics")
        ui.wait_visible(t("page-login"))
        got = ui.fetch("GET", "topics")
        assert got["status"] == 401 and got["body"]["error"] == "unauthorized", got
        ui.shot("login")
        ui.fill(t("login-username"), "alice")
        ui.fill(t("login-password"), "wrong-password")
        ui.click(t("login-submit"))
        ui.wait("a login error", lambda: (ui.text(t("login-error")) or "").strip())
        assert ui.visible(t("page-login"))
        ui.fill(t("login-password"), USERS["alice"])
        ui.click(t("login-submit"))
        ui.wait_text(t("principal"), "User:alice")
        ui.wait_visible(t("page-topics"))
        ui.fill(t("topic-filter"), prefix)
        ui.wait_count(f"{t('topics-table')} tbody tr[data-key]", 1)
        assert ui.keys("topics-table") == [shown]
        assert ui.count(row("topics-table", hidden)) == 0
        ui.shot("topics-alice")
        # Listing ACLs and users takes DESCRIBE on the cluster, which alice lacks.
        ui.route("security")
        ui.wait_visible(t("acls-denied"))
        assert USERS["alice"] not in ui.eval("() => document.documentElement.outerHTML")
        ui.click(t("logout"))
        ui.wait_visible(t("page-login"))
        assert ui.fetch("GET", "topics")["status"] == 401
        assert ui.errors == [], ui.errors
    finally:
        ui.close()
