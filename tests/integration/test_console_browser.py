"""The web console (/console/ on the broker's HTTP listener) in a real headless chromium
against `chronik serve` processes, with data made by confluent-kafka, the event store's
Python API and the schema registry client: each page shows what the Kafka protocol and
the CLI say (`chronik topics describe`, `chronik groups describe`); topics are created,
altered and deleted from the page; the message browser finds records by key, offset, the
end, and shows JSON, hex and schema-decoded values without letting a record's text run as
script, and pages on over every partition showing each record once; a group's lag moves
on the open page as a consumer reads (no reload) and an offset reset goes dry run, then
apply; an aggregate's events appear after an append from the page;
a write without the CSRF token is refused; on a secured broker (SASL SCRAM, the ACL
authorizer) the console asks for a login and a user sees only the topics it may DESCRIBE.
Screenshots of the main pages go to test-artifacts/console/.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

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
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from chronik.eventstore import EventStore

from .browser_support import (
    USERS,
    Console,
    ConsolePage,
    Secured,
    chromium,
    cli_group_rows,
    consume,
    describe_partitions,
    open_console,
    require_browser,
    secured_console,
)
from .cli_support import chronik
from .helpers import BASE_TS, create_topic, topic_name, wait_until
from .registry_support import avro_record

try:
    from playwright.sync_api import expect
except ImportError:  # require_browser() skips (or fails in CI) before any test runs
    expect = None  # type: ignore[assignment]

LIVE_MS = 20_000  # a few 3 s refreshes on a loaded machine


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    require_browser()
    with open_console(tmp_path_factory) as c:
        yield c


@pytest.fixture
def ui(browser: Any, console: Console) -> Iterator[ConsolePage]:
    page = ConsolePage(browser, console.url)
    yield page
    errors = list(page.errors)
    page.close()
    assert errors == [], errors


def int_text(locator: Any) -> int:
    return int(locator.text_content().strip())


# -- overview, topics, a topic ------------------------------------------------------------


def test_overview_shows_the_cluster_as_metadata_does(ui: ConsolePage, console: Console) -> None:
    topic = topic_name("ui-overview")
    create_topic(console.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": console.bootstrap})
    for i in range(20):
        producer.produce(topic, value=b"v" * 200, partition=i % 3)
    assert producer.flush(30) == 0
    response = ui.page.goto(f"{console.url}/console/")
    assert response is not None and response.status == 200
    # The page is served with a policy that forbids inline script and style.
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy or "default-src 'self'" in policy, policy
    expect(ui.el("page-overview")).to_be_visible()
    md = AdminClient({"bootstrap.servers": console.bootstrap}).list_topics(timeout=10)
    partitions = sum(len(t.partitions) for t in md.topics.values())
    expect(ui.el("stat-brokers")).to_have_text(str(len(md.brokers)))
    expect(ui.el("stat-controller")).to_have_text(str(md.controller_id))
    expect(ui.el("stat-offline")).to_have_text("0")
    expect(ui.el("stat-under-replicated")).to_have_text("0")
    # Topics come and go while the page is open (other tests' topics): within a refresh
    # the figures are the metadata's.
    expect(ui.el("stat-partitions")).to_have_text(str(partitions), timeout=LIVE_MS)
    (broker_id,) = md.brokers
    expect(ui.cell("brokers-table", broker_id, "host")).to_have_text(console.bootstrap)
    expect(ui.cell("brokers-table", broker_id, "leaders")).to_have_text(str(partitions))
    disk = ui.cell("brokers-table", broker_id, "disk_bytes").get_attribute("title")
    assert disk is not None and int(disk.split()[0]) > 0
    ui.shot("overview")


def test_topics_and_partitions_match_the_cli(ui: ConsolePage, console: Console) -> None:
    prefix = topic_name("ui-topics")
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
    ui.el("topic-filter").fill(prefix)
    expect(ui.rows("topics-table")).to_have_count(2)
    assert ui.keys("topics-table") == [big, small]
    expect(ui.cell("topics-table", big, "partitions")).to_have_text("3")
    expect(ui.cell("topics-table", big, "replication_factor")).to_have_text("1")
    expect(ui.cell("topics-table", big, "messages")).to_have_text("30")
    expect(ui.cell("topics-table", small, "messages")).to_have_text("5")
    expect(ui.cell("topics-table", big, "retention_ms")).to_have_text("1 h")
    size = ui.cell("topics-table", big, "size_bytes").get_attribute("title")
    assert size is not None and int(size.split()[0]) >= 3000
    expect(ui.el("pager-info")).to_have_text("1–2 of 2")
    # Messages per second: from the second look on (the backend samples the end offsets).
    expect(ui.cell("topics-table", big, "messages_per_sec")).to_have_text(
        re.compile(r"^\d"), timeout=LIVE_MS
    )
    ui.shot("topics")
    ui.el("topic-filter").fill(prefix + "-sm")
    expect(ui.rows("topics-table")).to_have_count(1)

    # A topic's partitions as `chronik topics describe` and the watermarks say.
    described = describe_partitions(console.bootstrap, big)
    ui.route("topics/" + big)
    expect(ui.rows("partitions-table")).to_have_count(3)
    consumer = Consumer({"bootstrap.servers": console.bootstrap, "group.id": "ui-watermarks"})
    try:
        for p, (leader, replicas, isr) in described.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(big, p), timeout=10)
            expect(ui.cell("partitions-table", p, "leader")).to_have_text(leader)
            expect(ui.cell("partitions-table", p, "replicas")).to_have_text(replicas)
            expect(ui.cell("partitions-table", p, "isr")).to_have_text(isr)
            expect(ui.cell("partitions-table", p, "log_start_offset")).to_have_text(str(low))
            expect(ui.cell("partitions-table", p, "log_end_offset")).to_have_text(str(high))
            expect(ui.cell("partitions-table", p, "high_watermark")).to_have_text(str(high))
    finally:
        consumer.close()
    expect(ui.cell("configs-table", "retention.ms", "value")).to_have_text("3600000")
    expect(ui.el("partitions-info")).to_be_hidden()
    ui.shot("topic")

    # A topic of many partitions: its page builds a hundred rows at a time.
    wide = f"{prefix}-wide"
    create_topic(console.bootstrap, wide, 130)
    ui.route("topics/" + wide)
    expect(ui.rows("partitions-table")).to_have_count(100)
    expect(ui.el("partitions-info")).to_have_text("1–100 of 130")
    ui.el("partitions-next").click()
    expect(ui.rows("partitions-table")).to_have_count(30)
    assert ui.keys("partitions-table") == [str(p) for p in range(100, 130)]
    # The live refresh keeps the page shown.
    ui.page.wait_for_timeout(3500)
    expect(ui.el("partitions-info")).to_have_text("101–130 of 130")


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return entries[name].value if name in entries else None


def test_create_alter_and_delete_a_topic_from_the_page(ui: ConsolePage, console: Console) -> None:
    name = topic_name("ui-made")
    admin = AdminClient({"bootstrap.servers": console.bootstrap})
    ui.open("topics")
    ui.el("topic-create-name").fill(name)
    ui.el("topic-create-partitions").fill("2")
    ui.el("topic-create-configs").fill("cleanup.policy=compact\n")
    ui.el("topic-create-submit").click()
    expect(ui.el("topic-create-result")).to_have_text("created " + name)
    wait_until(
        lambda: (
            name in admin.list_topics(timeout=10).topics
            and len(admin.list_topics(name, timeout=10).topics[name].partitions) == 2
        ),
        f"{name} with 2 partitions",
    )
    assert topic_config(console.bootstrap, name, "cleanup.policy") == "compact"

    ui.route("topics/" + name)
    expect(ui.rows("partitions-table")).to_have_count(2)
    ui.el("config-name").fill("retention.ms")
    ui.el("config-value").fill("7200000")
    ui.el("config-set").click()
    expect(ui.cell("configs-table", "retention.ms", "value")).to_have_text("7200000")
    assert topic_config(console.bootstrap, name, "retention.ms") == "7200000"
    ui.el("config-name").fill("cleanup.policy")
    ui.el("config-delete").click()
    expect(ui.cell("configs-table", "cleanup.policy", "value")).to_have_text("delete")
    assert topic_config(console.bootstrap, name, "cleanup.policy") == "delete"

    ui.route("topics")
    ui.el("topic-filter").fill(name)
    expect(ui.rows("topics-table")).to_have_count(1)
    ui.page.locator(
        f'[data-test=topics-table] tr[data-key="{name}"] [data-test=topic-delete]'
    ).click()
    # The confirmation survives a live refresh; only the second click deletes.
    ui.page.wait_for_timeout(3500)
    assert name in admin.list_topics(timeout=10).topics
    ui.el("topic-delete-confirm").click()
    expect(ui.rows("topics-table")).to_have_count(0, timeout=LIVE_MS)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, f"{name} deleted")


# -- the message browser --------------------------------------------------------------------

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def test_message_browser_finds_records_by_key_and_offset(ui: ConsolePage, console: Console) -> None:
    topic = topic_name("ui-msgs")
    create_topic(console.bootstrap, topic, 2)
    placed: dict[tuple[int, int], bytes | None] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[(msg.partition(), msg.offset())] = msg.key()

    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(40):
        value = json.dumps({"n": i, "user": f"user-{i % 5}"}).encode()
        producer.produce(
            topic,
            key=f"user-{i % 5}".encode(),
            value=value,
            partition=i % 2,
            headers=[("trace", f"t-{i}".encode())],
            on_delivery=delivered,
        )
    producer.produce(
        topic, key=b"hostile", value=HOSTILE.encode(), partition=0, on_delivery=delivered
    )
    producer.produce(
        topic, key=b"bin", value=b"\x00\xff\x10bin", partition=1, on_delivery=delivered
    )
    assert producer.flush(30) == 0
    # A value in the registry's wire format (magic 0, 4-byte id, Avro).
    registry = SchemaRegistryClient({"url": console.registry})
    schema = avro_record("Visit", ("page", "string"), ("ms", "long"))
    serialize = AvroSerializer(registry, schema)
    framed = serialize({"page": "/home", "ms": 42}, SerializationContext(topic, MessageField.VALUE))
    schema_id = int.from_bytes(framed[1:5], "big")
    producer.produce(topic, key=b"avro", value=framed, partition=1, on_delivery=delivered)
    assert producer.flush(30) == 0

    ui.open(f"topics/{topic}/messages")
    expect(ui.el("msg-partition").locator("option")).to_have_count(3)

    def load(
        partition: str = "",
        start: str = "beginning",
        offset: str = "0",
        key: str = "",
        limit: str = "100",
        fmt: str = "text",
    ) -> None:
        ui.el("msg-partition").select_option(partition)
        ui.el("msg-from").select_option(start)
        if start == "offset":
            ui.el("msg-offset").fill(offset)
        if start == "timestamp":
            ui.el("msg-timestamp").fill(offset)
        ui.el("msg-limit").fill(limit)
        ui.el("msg-key").fill(key)
        ui.el("msg-format").select_option(fmt)
        ui.el("msg-status").evaluate("n => { n.textContent = ''; }")
        ui.el("msg-load").click()
        expect(ui.el("msg-status")).to_contain_text("record")

    # By key, over both partitions: exactly the records the producer placed with that key.
    load(key="user-3")
    wanted = sorted(f"{p}:{o}" for (p, o), k in placed.items() if k == b"user-3")
    assert len(wanted) == 8
    assert sorted(ui.keys("messages-table")) == wanted
    # Over all partitions each one's next offset is shown (one number cannot say it).
    expect(ui.el("msg-status")).to_contain_text("partitions go on at 0: ")
    expect(ui.el("msg-next")).to_be_disabled()
    for row_key in wanted:
        expect(ui.cell("messages-table", row_key, "key")).to_have_text("user-3")
        expect(ui.cell("messages-table", row_key, "headers")).to_contain_text("trace")
    # JSON values are shown parsed and pretty-printed.
    load(key="user-3", fmt="json")
    first = wanted[0]
    assert '"user": "user-3"' in ui.cell("messages-table", first, "value").text_content()
    ui.shot("messages")

    # From an offset of one partition: that offset first, in order, as many as asked.
    load(partition="1", start="offset", offset="5", limit="3")
    assert ui.keys("messages-table") == ["1:5", "1:6", "1:7"]
    assert '"n": 11' in ui.cell("messages-table", "1:5", "value").text_content().replace(",", "")
    expect(ui.el("msg-next")).to_be_enabled()
    ui.el("msg-next").click()
    expect(ui.rows("messages-table").first).to_have_attribute("data-key", "1:8")
    # From the end: the last records of the partition.
    load(partition="0", start="end", limit="2")
    end0 = max(o for p, o in placed if p == 0)
    assert ui.keys("messages-table") == [f"0:{end0 - 1}", f"0:{end0}"]

    # A record's text is text: markup in a value is shown, never run.
    load(key="hostile")
    assert ui.keys("messages-table") == [f"0:{end0}"]
    expect(ui.cell("messages-table", f"0:{end0}", "value")).to_contain_text(HOSTILE)
    assert ui.page.evaluate("window.__pwned === undefined")
    assert (
        ui.page.locator("[data-test=messages-table] img, [data-test=messages-table] script").count()
        == 0
    )

    # Binary as hex; a registry-framed value decoded with its schema id.
    load(key="bin", fmt="hex")
    (row,) = ui.keys("messages-table")
    hex_text = re.sub(r"[\s:]", "", ui.cell("messages-table", row, "value").text_content())
    assert "00ff1062696e" in hex_text.lower()
    load(key="avro", fmt="schema")
    (row,) = ui.keys("messages-table")
    value = ui.cell("messages-table", row, "value")
    expect(value).to_contain_text(f"#{schema_id}")
    expect(value).to_contain_text('"page": "/home"')

    # From a timestamp: the first record at or after it (ListOffsets), as milliseconds or
    # as a date the browser reads.
    timed = topic_name("ui-timed")
    create_topic(console.bootstrap, timed, 1)
    for i in range(10):
        producer.produce(timed, value=f"at-{i}".encode(), timestamp=BASE_TS + i * 1000)
    assert producer.flush(30) == 0
    ui.route(f"topics/{timed}/messages")
    expect(ui.el("msg-partition").locator("option")).to_have_count(2)
    load(partition="0", start="timestamp", offset=str(BASE_TS + 4500), limit="2")
    assert ui.keys("messages-table") == ["0:5", "0:6"]
    expect(ui.cell("messages-table", "0:5", "value")).to_contain_text("at-5")
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((BASE_TS + 7000) / 1000))
    load(partition="0", start="timestamp", offset=iso, limit="1")
    assert ui.keys("messages-table") == ["0:7"]


def test_next_page_goes_on_over_all_partitions(ui: ConsolePage, console: Console) -> None:
    """Over every partition, with a key filter, "Next page" goes on from each partition's
    own offset (offsets=P:N,...): every matching record is shown once, none twice."""
    topic = topic_name("ui-pages")
    create_topic(console.bootstrap, topic, 3)
    placed: dict[str, bytes] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[f"{msg.partition()}:{msg.offset()}"] = msg.key()

    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(120):
        # Timestamps out of order within a partition: the merge must keep offset order.
        producer.produce(topic, key=f"user-{i % 4}".encode(), value=f"v{i}".encode(),
                         partition=i % 3, timestamp=BASE_TS + (i * 37) % 120 * 1000,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    wanted = sorted(k for k, key in placed.items() if key == b"user-1")
    assert len(wanted) == 30

    ui.open(f"topics/{topic}/messages")
    expect(ui.el("msg-partition").locator("option")).to_have_count(4)
    ui.el("msg-partition").select_option("")
    ui.el("msg-from").select_option("beginning")
    ui.el("msg-limit").fill("4")
    ui.el("msg-key").fill("user-1")
    shown: list[str] = []
    pages = 0
    ui.el("msg-status").evaluate("n => { n.textContent = ''; }")
    ui.el("msg-load").click()
    while True:
        expect(ui.el("msg-status")).to_contain_text("record")
        pages += 1
        keys = ui.keys("messages-table")
        assert len(keys) <= 4
        shown.extend(keys)
        for row_key in keys:
            expect(ui.cell("messages-table", row_key, "key")).to_have_text("user-1")
        if ui.el("msg-next").is_disabled():
            break
        assert pages < 40, "no end to the pages"
        ui.el("msg-status").evaluate("n => { n.textContent = ''; }")
        ui.el("msg-next").click()
    assert sorted(shown) == wanted and len(shown) == len(set(shown))
    assert pages >= 30 // 4
    expect(ui.el("msg-status")).to_contain_text("at the end")
    ui.shot("messages-paged")


# -- consumer groups ----------------------------------------------------------------------


def committed(bootstrap: str, group: str, topic: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = reader.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        reader.close()


def test_group_lag_moves_live_and_an_offset_reset_applies(
    ui: ConsolePage, console: Console
) -> None:
    topic = topic_name("ui-lag")
    group = "ui-group-" + uuid.uuid4().hex[:8]
    create_topic(console.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": console.bootstrap, "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": console.bootstrap,
            "group.id": group,
            "client.id": "ui-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        consume(consumer, 30)
        ui.open(f"groups/{group}")
        key = f"{topic}:0"
        expect(ui.el("group-total-lag")).to_have_text("70", timeout=LIVE_MS)
        expect(ui.el("group-state")).to_have_text("Stable")
        expect(ui.cell("offsets-table", key, "committed")).to_have_text("30")
        expect(ui.cell("offsets-table", key, "log_end_offset")).to_have_text("100")
        expect(ui.rows("members-table")).to_have_count(1)
        (member,) = ui.keys("members-table")
        expect(ui.cell("members-table", member, "client_id")).to_have_text("ui-reader")
        expect(ui.cell("members-table", member, "assignment")).to_have_text(f"{topic}-0")
        # What `chronik groups describe` prints.
        cli = cli_group_rows(console.bootstrap, group)[(topic, 0)]
        assert (cli["CURRENT-OFFSET"], cli["LOG-END-OFFSET"], cli["LAG"]) == ("30", "100", "70")
        assert cli["CONSUMER-ID"] == member
        expect(ui.cell("offsets-table", key, "member_id")).to_have_text(member)
        ui.shot("group")

        # An active group's offsets cannot be reset (as the CLI says).
        ui.el("reset-topic").select_option(topic)
        ui.el("reset-dry-run").click()
        expect(ui.el("error")).to_contain_text("NON_EMPTY_GROUP")

        # The consumer reads on: the open page follows, without a reload.
        ui.page.evaluate("window.__sameDocument = true")
        before = int(ui.el("refreshed").get_attribute("data-count"))
        consume(consumer, 70)
        expect(ui.el("group-total-lag")).to_have_text("0", timeout=LIVE_MS)
        expect(ui.cell("offsets-table", key, "lag")).to_have_text("0")
        assert ui.page.evaluate("window.__sameDocument === true")
        assert int(ui.el("refreshed").get_attribute("data-count")) > before
    finally:
        consumer.close()

    # The group list shows it too, with its lag.
    ui.route("groups")
    ui.el("group-filter").fill(group)
    expect(ui.rows("groups-table")).to_have_count(1)
    expect(ui.cell("groups-table", group, "lag")).to_have_text("0")
    expect(ui.cell("groups-table", group, "state")).to_have_text("Empty", timeout=LIVE_MS)
    ui.shot("groups")

    # Reset to the earliest offset: a dry run changes nothing, then Apply commits.
    ui.route(f"groups/{group}")
    expect(ui.el("group-state")).to_have_text("Empty", timeout=LIVE_MS)
    ui.el("reset-topic").select_option(topic)
    ui.el("reset-to").select_option("earliest")
    ui.el("reset-dry-run").click()
    expect(ui.cell("reset-table", f"{topic}:0", "to")).to_have_text("0")
    expect(ui.cell("reset-table", f"{topic}:0", "from")).to_have_text("100")
    expect(ui.el("reset-status")).to_contain_text("Dry run")
    assert committed(console.bootstrap, group, topic) == 100
    ui.el("reset-apply").click()
    expect(ui.el("reset-status")).to_have_text("Applied.")
    expect(ui.el("group-total-lag")).to_have_text("100", timeout=LIVE_MS)
    assert committed(console.bootstrap, group, topic) == 0
    # Shift by +25 from there, in one go.
    ui.el("reset-to").select_option("shift")
    ui.el("reset-value").fill("25")
    ui.el("reset-dry-run").click()
    expect(ui.cell("reset-table", f"{topic}:0", "to")).to_have_text("25")
    ui.el("reset-apply").click()
    expect(ui.el("group-total-lag")).to_have_text("75", timeout=LIVE_MS)
    assert committed(console.bootstrap, group, topic) == 25

    # An empty group can be deleted.
    ui.el("group-delete").click()
    ui.el("group-delete-confirm").click()
    expect(ui.el("page-groups")).to_be_visible()
    done = chronik("groups", "list", bootstrap=console.bootstrap)
    assert group not in done.stdout


# -- aggregates -----------------------------------------------------------------------------


def test_an_aggregates_events_appear_after_an_append(ui: ConsolePage, console: Console) -> None:
    topic = topic_name("ui-agg")
    create_topic(console.bootstrap, topic, 2, **{"key.versioning.enable": "true"})
    store = EventStore(console.bootstrap, console.url)
    store.append(topic, "acct-1", ["opened", {"amount": 5}], expected_version=0)

    ui.open(f"aggregates?topic={topic}&key=acct-1")
    expect(ui.el("agg-version-count")).to_have_text("2")
    assert ui.keys("events-table") == ["0", "1"]
    expect(ui.cell("events-table", 0, "value")).to_contain_text("opened")
    expect(ui.cell("events-table", 1, "value")).to_contain_text('"amount"')
    expect(ui.el("agg-expected")).to_have_value("2")

    ui.el("agg-value").fill('{"amount": 7}')
    ui.el("agg-append").click()
    expect(ui.el("agg-version-count")).to_have_text("3")
    assert ui.keys("events-table") == ["0", "1", "2"]
    events = list(store.read(topic, "acct-1"))
    assert [json.loads(e.value) if e.value.startswith(b"{") else e.value for e in events] == [
        b"opened",
        {"amount": 5},
        {"amount": 7},
    ]
    ui.shot("aggregate")

    # A stale expected version: refused, nothing written.
    ui.el("agg-expected").fill("1")
    ui.el("agg-value").fill("late")
    ui.el("agg-append").click()
    expect(ui.el("error")).to_contain_text("version conflict")
    expect(ui.el("error")).to_contain_text("3")
    assert len(list(store.read(topic, "acct-1"))) == 3


# -- schemas --------------------------------------------------------------------------------


def test_schemas_page_shows_versions_diff_and_compatibility(
    ui: ConsolePage, console: Console
) -> None:
    client = SchemaRegistryClient({"url": console.registry})
    subject = topic_name("ui-pay") + "-value"
    v1 = avro_record("Payment", ("amount", "long"))
    v2 = avro_record("Payment", ("amount", "long"), ("currency", "string", "EUR"))
    client.register_schema(subject, Schema(v1, "AVRO"))
    latest_id = client.register_schema(subject, Schema(v2, "AVRO"))

    ui.open(f"schemas?subject={subject}")
    ui.el("schema-filter").fill(subject)
    expect(ui.rows("schemas-table")).to_have_count(1)
    expect(ui.cell("schemas-table", subject, "versions")).to_have_text("1, 2")
    expect(ui.cell("schemas-table", subject, "latest_id")).to_have_text(str(latest_id))
    expect(ui.cell("schemas-table", subject, "type")).to_have_text("AVRO")
    expect(ui.el("schema-subject")).to_have_text(subject)
    expect(ui.el("schema-text")).to_contain_text('"currency"')
    # v1 -> v2 adds the currency field and takes nothing away but a closing line's shape.
    expect(ui.el("schema-diff").locator(".add", has_text='"currency"')).to_have_count(1)
    assert ui.el("schema-diff").locator(".del", has_text="amount").count() == 0
    level = client.get_compatibility()
    expect(ui.el("schema-compat")).to_have_text(level)
    ui.el("schema-version").select_option("1")
    expect(ui.el("schema-text")).not_to_contain_text("currency")
    ui.shot("schemas")


# -- CSRF -----------------------------------------------------------------------------------


def test_a_write_without_the_csrf_token_is_refused(ui: ConsolePage, console: Console) -> None:
    ui.open("overview")
    expect(ui.el("stat-brokers")).not_to_be_empty()
    admin = AdminClient({"bootstrap.servers": console.bootstrap})
    name = topic_name("ui-csrf")
    body = {"name": name, "partitions": 1, "replication_factor": 1, "configs": {}}
    got = ui.fetch("POST", "topics", body)
    assert got["status"] == 403 and got["body"]["error"] == "csrf", got
    kept = topic_name("ui-kept")
    create_topic(console.bootstrap, kept, 1)
    got = ui.fetch("DELETE", f"topics/{kept}")
    assert got["status"] == 403 and got["body"]["error"] == "csrf", got
    time.sleep(1)
    topics = admin.list_topics(timeout=10).topics
    assert name not in topics and kept in topics
    # The same request with the session's token goes through.
    got = ui.fetch("POST", "topics", body, csrf=True)
    assert got["status"] == 201, got
    wait_until(lambda: name in admin.list_topics(timeout=10).topics, f"{name} created")
    # The session gone (as after its idle timeout): the page's stale token is refused, and
    # the page takes a new session's token and writes.
    ui.context.clear_cookies()
    refused: list[int] = []
    ui.page.on(
        "response",
        lambda r: refused.append(r.status) if r.url.endswith("/console/api/topics") else None,
    )
    again = topic_name("ui-csrf-again")
    ui.route("topics")
    ui.el("topic-create-name").fill(again)
    ui.el("topic-create-submit").click()
    expect(ui.el("topic-create-result")).to_have_text("created " + again)
    wait_until(lambda: again in admin.list_topics(timeout=10).topics, f"{again} created")
    assert refused == [403, 201], refused


# -- a secured broker -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    require_browser()
    with secured_console(tmp_path_factory) as s:
        yield s


def login(ui: ConsolePage, user: str, password: str) -> None:
    expect(ui.el("login-form")).to_be_visible()
    ui.el("login-username").fill(user)
    ui.el("login-password").fill(password)
    ui.el("login-submit").click()


def test_a_user_sees_only_the_topics_it_may_describe(browser: Any, secured: Secured) -> None:
    admin = secured.admin()
    prefix = topic_name("ui-sec")
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
    # What the Kafka protocol shows alice.
    seen = secured.admin("alice").list_topics(timeout=10).topics
    assert shown in seen and hidden not in seen

    ui = ConsolePage(browser, secured.url)
    try:
        ui.open("topics")
        expect(ui.el("page-login")).to_be_visible()
        # Without a session every API call but session and login is refused.
        got = ui.fetch("GET", "topics")
        assert got["status"] == 401 and got["body"]["error"] == "unauthorized", got
        ui.shot("login")
        login(ui, "alice", "wrong-password")
        expect(ui.el("login-error")).not_to_be_empty()
        expect(ui.el("page-login")).to_be_visible()
        login(ui, "alice", USERS["alice"])
        expect(ui.el("principal")).to_have_text("User:alice")
        expect(ui.el("page-topics")).to_be_visible()
        ui.el("topic-filter").fill(prefix)
        expect(ui.rows("topics-table")).to_have_count(1)
        assert ui.keys("topics-table") == [shown]
        # Nor can alice open the other topic's page.
        ui.route("topics/" + hidden)
        expect(ui.el("error")).to_contain_text("AUTHORIZATION_FAILED")
        # Listing ACLs and users takes DESCRIBE on the cluster.
        ui.route("security")
        expect(ui.el("acls-denied")).to_be_visible()
        # The password never reaches the page.
        assert USERS["alice"] not in ui.page.content()
        assert USERS["alice"] not in json.dumps(ui.fetch("GET", "session"))
        # A logged-in write without the token: refused before any authorization.
        got = ui.fetch(
            "POST",
            "topics",
            {"name": prefix + "-x", "partitions": 1, "replication_factor": 1, "configs": {}},
        )
        assert got["status"] == 403 and got["body"]["error"] == "csrf", got
        ui.el("logout").click()
        expect(ui.el("page-login")).to_be_visible()
        got = ui.fetch("GET", "topics")
        assert got["status"] == 401, got
        assert ui.errors == [], ui.errors
    finally:
        ui.close()

    # The super user sees both topics, the ACLs and the SCRAM users.
    ui = ConsolePage(browser, secured.url)
    try:
        ui.open("topics")
        login(ui, "admin", USERS["admin"])
        expect(ui.el("principal")).to_have_text("User:admin")
        ui.el("topic-filter").fill(prefix)
        expect(ui.rows("topics-table")).to_have_count(2)
        ui.route("security")
        expect(ui.rows("users-table")).to_have_count(2)
        assert sorted(ui.keys("users-table")) == ["admin", "alice"]
        expect(ui.cell("users-table", "alice", "mechanisms")).to_contain_text("SCRAM-SHA-256")
        expect(ui.page.locator("[data-test=acls-table] td[data-col=principal]")).to_contain_text(
            ["User:alice"]
        )
        ui.shot("security")
        # This broker serves no schema registry: the page says so.
        ui.route("schemas")
        expect(ui.el("no-registry")).to_be_visible()
        assert ui.errors == [], ui.errors
    finally:
        ui.close()
