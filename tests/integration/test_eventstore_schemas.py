"""The event store's HTTP API with the broker's own schema registry, on an embedded broker
serving both (``http.listen``, ``schema.registry.listen``): appends that name a subject
carry JSON documents, checked against the subject's Avro or JSON schema and stored in
Confluent's wire format, so confluent-kafka's deserializers read the same events from the
topic; a value that does not fit refuses the whole append (422) and writes nothing; reads
with decode=true give the values back as JSON; expected versions still rule."""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from conftest import free_port

from .cli_support import chronik
from .helpers import create_topic, topic_name

ACCOUNT_V1 = json.dumps(
    {
        "type": "record",
        "name": "AccountEvent",
        "namespace": "bank",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["OPEN", "MOVE"]}},
            {"name": "amount", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        ],
    }
)
ACCOUNT_V2 = json.dumps(
    {
        **json.loads(ACCOUNT_V1),
        "fields": [
            *json.loads(ACCOUNT_V1)["fields"],
            {"name": "currency", "type": "string", "default": "EUR"},
        ],
    }
)
ORDER_JSON = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "order": {"type": "string"},
            "qty": {"type": "integer", "minimum": 1},
            "lines": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["order", "qty"],
    }
)


@dataclass
class Served:
    bootstrap: str
    http_port: int
    registry_url: str

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=20)
        try:
            payload = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=payload, headers=headers or {})
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def registry(self) -> SchemaRegistryClient:
        return SchemaRegistryClient({"url": self.registry_url})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from chronik.broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(
        data_dir=tmp_path_factory.mktemp("es-schemas") / "data",
        config={"http.listen": "127.0.0.1:0", "schema.registry.listen": "127.0.0.1:0"},
    )
    embedded.start()
    try:
        broker = embedded.broker
        assert broker is not None and broker.http_port and broker.registry_port
        yield Served(
            embedded.bootstrap, broker.http_port, f"http://127.0.0.1:{broker.registry_port}"
        )
    finally:
        embedded.close()


def versioned_topic(served: Served, prefix: str) -> str:
    topic = topic_name(prefix)
    create_topic(served.bootstrap, topic, 1, **{"key.versioning.enable": "true"})
    return topic


def events_path(topic: str, key: str, query: str = "") -> str:
    path = f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key, safe='')}/events"
    return f"{path}?{query}" if query else path


def version_count(served: Served, topic: str, key: str) -> int:
    status, doc = served.call("GET", f"/v1/topics/{quote(topic, safe='')}/keys/{quote(key)}")
    assert status == 200, doc
    return int(doc["version_count"])


def end_offset(served: Served, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": served.bootstrap, "group.id": "watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def raw_value(event: dict[str, Any]) -> bytes:
    if event["value_encoding"] == "base64":
        return base64.b64decode(event["value"])
    return str(event["value"]).encode()


def consume_values(served: Served, topic: str, n: int, deserializer: Any) -> list[Any]:
    """The first ``n`` values of the topic, through a confluent-kafka deserializer."""
    consumer = Consumer(
        {
            "bootstrap.servers": served.bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    ctx = SerializationContext(topic, MessageField.VALUE)
    try:
        while len(got) < n:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} of {n} records came back"
            assert msg.error() is None, msg.error()
            got.append(deserializer(msg.value(), ctx))
    finally:
        consumer.close()
    return got


def test_avro_appends_decode_and_reach_confluent_consumers(served: Served) -> None:
    topic = versioned_topic(served, "es-avro")
    schema_id = served.registry().register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))
    events = [
        {"kind": "OPEN", "amount": 0, "note": None, "tags": []},
        {"kind": "MOVE", "amount": 250, "note": "salary", "tags": ["in"]},
        {"kind": "MOVE", "amount": -75, "note": None, "tags": ["out", "card"]},
    ]
    status, doc = served.call(
        "POST",
        events_path(topic, "acct-1", "subject_strategy=topic"),
        {"events": [{"value": v} for v in events]},
        {"If-None-Match": "*"},
    )
    assert status == 201, doc
    assert doc["versions"] == [0, 1, 2]
    assert (doc["subject"], doc["schema_version"], doc["schema_id"]) == (
        f"{topic}-value",
        1,
        schema_id,
    )

    status, read = served.call("GET", events_path(topic, "acct-1", "decode=true"))
    assert status == 200, read
    assert [e["value_json"] for e in read["events"]] == events
    assert {e["schema_id"] for e in read["events"]} == {schema_id}
    framing = b"\0" + schema_id.to_bytes(4, "big")
    for event in read["events"]:
        assert raw_value(event)[:5] == framing

    # Without decode=true the events come back as before: no schema fields.
    status, plain = served.call("GET", events_path(topic, "acct-1"))
    assert status == 200
    assert all("value_json" not in e and "schema_id" not in e for e in plain["events"])

    got = consume_values(served, topic, len(events), AvroDeserializer(served.registry()))
    assert got == events


def test_a_value_that_does_not_fit_refuses_the_whole_append(served: Served) -> None:
    topic = versioned_topic(served, "es-bad")
    served.registry().register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))
    status, doc = served.call(
        "POST",
        events_path(topic, "acct-2", "subject_strategy=topic"),
        {"events": [{"value": {"kind": "OPEN", "amount": 1}}]},
    )
    assert status == 201, doc
    before_end = end_offset(served, topic)
    batch = [
        {"value": {"kind": "MOVE", "amount": 5}},
        {"value": {"kind": "MOVE", "amount": 6}},
        {"value": {"kind": "MOVE", "amount": "seven"}},
        {"value": {"kind": "MOVE", "amount": 8}},
    ]
    status, doc = served.call(
        "POST", events_path(topic, "acct-2", "subject_strategy=topic"), {"events": batch}
    )
    assert status == 422, doc
    assert doc["error"] == "value_mismatch"
    assert doc["index"] == 2
    assert "amount" in doc["reason"] and "seven" in doc["reason"]
    assert "event 2" in doc["message"]
    assert version_count(served, topic, "acct-2") == 1
    assert end_offset(served, topic) == before_end

    # A symbol the enum lacks, and a missing field without a default, are refused too.
    for bad, index in (
        ([{"value": {"kind": "CLOSE", "amount": 1}}], 0),
        ([{"value": {"kind": "MOVE", "amount": 1}}, {"value": {"kind": "MOVE"}}], 1),
    ):
        status, doc = served.call(
            "POST", events_path(topic, "acct-2", "subject_strategy=topic"), {"events": bad}
        )
        assert (status, doc["index"]) == (422, index), doc
    assert version_count(served, topic, "acct-2") == 1
    assert end_offset(served, topic) == before_end


def test_version_pins_the_writer_schema_and_reads_use_each_ones(served: Served) -> None:
    topic = versioned_topic(served, "es-ver")
    subject = f"{topic}-events"
    sr = served.registry()
    first = sr.register_schema(subject, Schema(ACCOUNT_V1, "AVRO"))
    second = sr.register_schema(subject, Schema(ACCOUNT_V2, "AVRO"))
    assert first != second
    old = {"kind": "OPEN", "amount": 1, "note": None, "tags": []}
    new = {"kind": "MOVE", "amount": 2, "note": None, "tags": [], "currency": "CHF"}
    status, doc = served.call(
        "POST",
        events_path(topic, "acct-3", f"subject={subject}&version=1"),
        {"events": [{"value": old}]},
    )
    assert (status, doc["schema_id"], doc["schema_version"]) == (201, first, 1), doc
    status, doc = served.call(
        "POST", events_path(topic, "acct-3", f"subject={subject}"), {"events": [{"value": new}]}
    )
    assert (status, doc["schema_id"], doc["schema_version"]) == (201, second, 2), doc
    status, read = served.call("GET", events_path(topic, "acct-3", "decode=true"))
    assert status == 200
    assert [(e["schema_id"], e["value_json"]) for e in read["events"]] == [
        (first, old),
        (second, new),
    ]


def test_expected_versions_hold_with_a_subject(served: Served) -> None:
    topic = versioned_topic(served, "es-expect")
    served.registry().register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))
    path = events_path(topic, "acct-4", "subject_strategy=topic")
    move = {"events": [{"value": {"kind": "MOVE", "amount": 3}}]}
    status, doc = served.call("POST", path, move, {"If-Match": "*"})
    assert (status, doc["error"]) == (412, "version_conflict"), doc
    status, doc = served.call("POST", path, move, {"If-None-Match": "*"})
    assert status == 201, doc
    status, doc = served.call("POST", path, move, {"If-None-Match": "*"})
    assert (status, doc["actual"]) == (412, 1), doc
    status, doc = served.call("POST", path, move, {"If-Match": '"0"'})
    assert (status, doc["expected"], doc["actual"]) == (412, 0, 1), doc
    # A value that does not fit is refused before the version is looked at, and the same
    # expected version then still takes the good events.
    bad = {"events": [{"value": {"kind": "MOVE", "amount": 1.5}}]}
    status, doc = served.call("POST", path, bad, {"If-Match": '"1"'})
    assert status == 422, doc
    status, doc = served.call("POST", path, move, {"If-Match": '"1"'})
    assert (status, doc["versions"]) == (201, [1]), doc
    assert version_count(served, topic, "acct-4") == 2


def test_subject_errors_write_nothing(served: Served) -> None:
    topic = versioned_topic(served, "es-errs")
    served.registry().register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))
    good = {"events": [{"value": {"kind": "OPEN", "amount": 1}}]}
    cases = [
        ("subject=no-such-subject", good, 404, "unknown_subject"),
        ("subject_strategy=topic&version=9", good, 404, "unknown_version"),
        ("subject_strategy=topic&version=zero", good, 400, "bad_request"),
        (f"subject={topic}-value&subject_strategy=topic", good, 400, "bad_request"),
        ("subject_strategy=record", good, 400, "bad_request"),
        ("version=1", good, 400, "bad_request"),
        (
            "subject_strategy=topic",
            {"events": [{"value": "AQI=", "value_encoding": "base64"}]},
            400,
            "bad_request",
        ),
        ("", {"events": [{"value": {"a": 1}, "value_encoding": "json"}]}, 400, "bad_request"),
        ("subject_strategy=topic", {"events": [{"value": 5}]}, 422, "value_mismatch"),
    ]
    for query, body, want_status, want_error in cases:
        status, doc = served.call("POST", events_path(topic, "acct-5", query), body)
        assert (status, doc["error"]) == (want_status, want_error), (query, doc)
        assert doc["message"]
    status, doc = served.call("POST", events_path(topic, "acct-5", "subject=nope"), good)
    assert "nope" in doc["message"]
    assert version_count(served, topic, "acct-5") == 0
    status, doc = served.call("GET", events_path(topic, "acct-5", "decode=maybe"))
    assert (status, doc["error"]) == (400, "bad_request")


def test_reads_decode_only_framed_values(served: Served) -> None:
    topic = versioned_topic(served, "es-mixed")
    schema_id = served.registry().register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))
    path = events_path(topic, "acct-6")
    # Plain events of the API's own forms, then one under the schema, then a value that
    # looks framed but names an id the registry does not have.
    status, _ = served.call(
        "POST",
        path,
        {
            "events": [
                {"value": "plain text"},
                {"value": {"not": "framed"}},
                {"value": "AAAAJxCq", "value_encoding": "base64"},
            ]
        },
    )
    assert status == 201
    status, _ = served.call(
        "POST",
        events_path(topic, "acct-6", "subject_strategy=topic"),
        {"events": [{"value": {"kind": "OPEN", "amount": 9}}]},
    )
    assert status == 201
    # A framed value with a known id whose payload is cut short.
    cut = base64.b64encode(b"\0" + schema_id.to_bytes(4, "big") + b"\x02").decode()
    status, _ = served.call("POST", path, {"events": [{"value": cut, "value_encoding": "base64"}]})
    assert status == 201
    status, plain = served.call("GET", path)
    status, read = served.call("GET", f"{path}?decode=true")
    assert status == 200
    events = read["events"]
    for before, after in zip(plain["events"][:3], events[:3], strict=True):
        assert before == after
    assert events[3]["schema_id"] == schema_id
    assert events[3]["value_json"] == {"kind": "OPEN", "amount": 9, "note": None, "tags": []}
    assert events[4]["schema_id"] == schema_id
    assert "value_json" not in events[4] and events[4]["decode_error"]


def test_json_schema_appends_decode_and_reach_confluent_consumers(served: Served) -> None:
    topic = versioned_topic(served, "es-json")
    subject = f"{topic}-orders"
    schema_id = served.registry().register_schema(subject, Schema(ORDER_JSON, "JSON"))
    orders = [
        {"order": "o-1", "qty": 2, "lines": ["apple", "pear"]},
        {"order": "o-2", "qty": 1},
    ]
    path = events_path(topic, "cust-1", f"subject={subject}&version=latest")
    bad = [{"value": orders[0]}, {"value": {"order": "o-3", "qty": 0}}]
    status, doc = served.call("POST", path, {"events": bad})
    assert (status, doc["index"]) == (422, 1), doc
    assert "qty" in doc["reason"]
    assert version_count(served, topic, "cust-1") == 0
    status, doc = served.call("POST", path, {"events": [{"value": v} for v in orders]})
    assert (status, doc["schema_id"]) == (201, schema_id), doc
    status, read = served.call("GET", events_path(topic, "cust-1", "decode=true"))
    assert [(e["schema_id"], e["value_json"]) for e in read["events"]] == [
        (schema_id, v) for v in orders
    ]
    got = consume_values(
        served, topic, len(orders), JSONDeserializer(None, schema_registry_client=served.registry())
    )
    assert got == orders


def test_a_broker_without_the_registry_says_what_is_needed(tmp_path) -> None:
    from chronik.broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(data_dir=tmp_path / "data", config={"http.listen": "127.0.0.1:0"})
    embedded.start()
    try:
        assert embedded.broker is not None and embedded.broker.http_port
        served = Served(embedded.bootstrap, embedded.broker.http_port, "")
        topic = versioned_topic(served, "es-noreg")
        good = {"events": [{"value": {"kind": "OPEN", "amount": 1}}]}
        for method, query, body in (
            ("POST", "subject_strategy=topic", good),
            ("GET", "decode=true", None),
        ):
            status, doc = served.call(method, events_path(topic, "k", query), body)
            assert (status, doc["error"]) == (501, "registry_not_served"), doc
            assert "schema.registry.listen" in doc["message"]
        assert version_count(served, topic, "k") == 0
        # Appends and reads without a subject are as they were.
        status, _ = served.call("POST", events_path(topic, "k"), good)
        assert status == 201
        status, read = served.call("GET", events_path(topic, "k"))
        assert json.loads(read["events"][0]["value"]) == good["events"][0]["value"]
    finally:
        embedded.close()


def test_schemas_need_describe_on_the_schemas_topic(tmp_path) -> None:
    from chronik.broker.embedded import EmbeddedBroker

    data = tmp_path / "data"
    users = {"admin": "admin-Pa55word", "alice": "alice-Secret-42"}
    for user, password in users.items():
        done = chronik(
            "users", "add", user, "--password-stdin", "--data-dir", str(data), input=password + "\n"
        )
        assert done.returncode == 0, done.stderr
    plain_port, sasl_port = free_port(), free_port()
    embedded = EmbeddedBroker(
        data_dir=data,
        port=plain_port,
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "authorizer.class.name": "chronik",
            "super.users": "User:admin",
            "http.listen": "127.0.0.1:0",
            "schema.registry.listen": "127.0.0.1:0",
        },
    )
    embedded.start()
    try:
        broker = embedded.broker
        assert broker is not None and broker.http_port and broker.registry_port
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{sasl_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "admin",
                "sasl.password": users["admin"],
            }
        )
        topic = topic_name("es-acl")
        admin.create_topics([NewTopic(topic, 1, 1, config={"key.versioning.enable": "true"})])[
            topic
        ].result(30)
        sr = SchemaRegistryClient(
            {
                "url": f"http://127.0.0.1:{broker.registry_port}",
                "basic.auth.user.info": f"admin:{users['admin']}",
            }
        )
        sr.register_schema(f"{topic}-value", Schema(ACCOUNT_V1, "AVRO"))

        def acl(name: str, operation: AclOperation) -> AclBinding:
            return AclBinding(
                ResourceType.TOPIC,
                name,
                ResourcePatternType.LITERAL,
                "User:alice",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )

        def grant(*bindings: AclBinding) -> None:
            for future in admin.create_acls(list(bindings), request_timeout=10).values():
                future.result()

        grant(acl(topic, AclOperation.READ), acl(topic, AclOperation.WRITE))
        served = Served(embedded.bootstrap, broker.http_port, "")
        alice = {
            "Authorization": "Basic "
            + base64.b64encode(f"alice:{users['alice']}".encode()).decode()
        }
        good = {"events": [{"value": {"kind": "OPEN", "amount": 1}}]}
        with_subject = events_path(topic, "k", "subject_strategy=topic")
        # alice may write and read the topic, but not read schemas: no subject, no decode.
        status, doc = served.call("POST", with_subject, good, alice)
        assert (status, doc["error"]) == (403, "forbidden"), doc
        assert "_schemas" in doc["message"]
        status, doc = served.call("GET", events_path(topic, "k", "decode=true"), headers=alice)
        assert status == 403 and "_schemas" in doc["message"]
        status, doc = served.call("GET", events_path(topic, "k"), headers=alice)
        assert (status, doc["version_count"]) == (200, 0)
        grant(acl("_schemas", AclOperation.DESCRIBE))
        deadline = time.monotonic() + 10
        while True:
            status, doc = served.call("POST", with_subject, good, alice)
            if status != 403 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 201, doc
        status, doc = served.call("GET", events_path(topic, "k", "decode=true"), headers=alice)
        assert status == 200
        assert doc["events"][0]["value_json"] == {
            "kind": "OPEN",
            "amount": 1,
            "note": None,
            "tags": [],
        }
    finally:
        embedded.close()


SHOP_PROTO = """syntax = "proto3";
package shop;

message Order {
  string id = 1;
  int64 cents = 2;
  repeated string lines = 3;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
}

message Refund {
  string order = 1;
  int64 cents = 2;
}
"""


def test_protobuf_messages_by_index_decode_and_reach_confluent_consumers(served: Served) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    from chronik.schemas.formats import parse

    topic = versioned_topic(served, "es-proto")
    schema_id = served.registry().register_schema(f"{topic}-value", Schema(SHOP_PROTO, "PROTOBUF"))
    orders = [{"id": "o-1", "cents": "250", "lines": ["tea"]}, {"id": "o-2", "cents": "75"}]
    status, doc = served.call(
        "POST",
        events_path(topic, "order-1", "subject_strategy=topic"),
        {"events": [{"value": v} for v in orders]},
    )
    assert (status, doc["schema_id"]) == (201, schema_id), doc
    refund = {"order": "o-1", "cents": "250"}
    line = {"sku": "tea-1", "qty": 3}
    for key, message, value in (
        ("refund-1", "shop.Refund", refund),
        ("line-1", "shop.Order.Line", line),
    ):
        status, doc = served.call(
            "POST",
            events_path(topic, key, f"subject_strategy=topic&message={message}"),
            {"events": [{"value": value}]},
        )
        assert status == 201, doc
    # A value that is not the message's JSON mapping, and a message the schema lacks.
    status, doc = served.call(
        "POST",
        events_path(topic, "order-1", "subject_strategy=topic"),
        {"events": [{"value": orders[0]}, {"value": {"id": "o-3", "cents": "many"}}]},
    )
    assert (status, doc["index"]) == (422, 1), doc
    status, doc = served.call(
        "POST",
        events_path(topic, "order-1", "subject_strategy=topic&message=shop.Nope"),
        {"events": [{"value": orders[0]}]},
    )
    assert (status, doc["error"]) == (400, "bad_request"), doc
    assert version_count(served, topic, "order-1") == 2

    decoded = {}
    for key in ("order-1", "refund-1", "line-1"):
        status, read = served.call("GET", events_path(topic, key, "decode=true"))
        assert status == 200
        assert {e["schema_id"] for e in read["events"]} == {schema_id}
        decoded[key] = [e["value_json"] for e in read["events"]]
    assert decoded == {"order-1": orders, "refund-1": [refund], "line-1": [line]}
    # Each record carries its message's indexes: Order [0] (one zero byte), Refund [1],
    # Order.Line [0, 0], as Confluent's serializers write them.
    status, read = served.call("GET", events_path(topic, "line-1"))
    assert raw_value(read["events"][0])[5:8] == b"\x04\x00\x00"

    shop = parse("PROTOBUF", SHOP_PROTO)
    order_class = shop.message_class("shop.Order")  # type: ignore[attr-defined]
    got = consume_values(
        served, topic, 2, ProtobufDeserializer(order_class, {"use.deprecated.format": False})
    )
    assert got == [order_class(id="o-1", cents=250, lines=["tea"]), order_class(id="o-2", cents=75)]
