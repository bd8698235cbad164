"""The schema registry a broker serves, driven by confluent-kafka's SchemaRegistryClient
and its Avro serializers, by python-schema-registry-client, and by raw HTTP where the
status, Confluent's error code or the content type is what is checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .cli_support import free_port
from .helpers import create_topic, topic_name
from .registry_support import CONTENT_TYPE, avro_record, call, wait_for_registry

USER_V1 = avro_record("User", ("name", "string"))
USER_V2 = avro_record("User", ("name", "string"), ("age", "int", 0))
USER_BREAKING = avro_record("User", ("name", "string"), ("email", "string"))


@pytest.fixture
def registry_broker(tmp_path) -> Iterator[tuple[str, str]]:
    """(bootstrap, registry URL) of an embedded broker serving the registry."""
    from chronik.broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(
        data_dir=tmp_path / "data", config={"schema.registry.listen": "127.0.0.1:0"}
    )
    embedded.start()
    try:
        assert embedded.broker is not None
        yield embedded.bootstrap, f"http://127.0.0.1:{embedded.broker.registry_port}"
    finally:
        embedded.close()


def client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url})


def test_register_read_back_and_one_id_per_schema(registry_broker):
    _, url = registry_broker
    sr = client(url)
    first = sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    assert first == 1
    # The same schema again: its id, no new version.
    assert client(url).register_schema("users-value", Schema(USER_V1, "AVRO")) == first
    assert sr.get_versions("users-value") == [1]
    # The same schema under another subject: the same global id, that subject's version 1.
    assert client(url).register_schema("other-value", Schema(USER_V1, "AVRO")) == first
    assert client(url).get_latest_version("other-value").version == 1
    second = sr.register_schema("users-value", Schema(USER_V2, "AVRO"))
    assert second == first + 1
    latest = client(url).get_latest_version("users-value")
    assert (latest.schema_id, latest.version) == (second, 2)
    assert json.loads(latest.schema.schema_str) == json.loads(USER_V2)
    assert json.loads(client(url).get_schema(first).schema_str) == json.loads(USER_V1)
    assert client(url).get_version("users-value", 1).schema_id == first
    assert sorted(sr.get_subjects()) == ["other-value", "users-value"]
    found = client(url).lookup_schema("users-value", Schema(USER_V1, "AVRO"))
    assert (found.schema_id, found.version) == (first, 1)
    assert sorted(sr.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]
    assert sorted(client(url).get_subjects_by_schema_id(first)) == ["other-value", "users-value"]
    status, body, ctype = call(f"{url}/schemas/ids/{first}/versions")
    assert status == 200 and ctype == CONTENT_TYPE
    assert sorted((v["subject"], v["version"]) for v in body) == [
        ("other-value", 1),
        ("users-value", 1),
    ]
    status, text, _ = call(f"{url}/subjects/users-value/versions/latest/schema")
    assert status == 200 and text == json.loads(USER_V2)


def test_avro_serializer_and_deserializer_through_the_broker(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("avro")
    create_topic(bootstrap, topic)
    serializer = AvroSerializer(client(url), USER_V1)
    producer = Producer({"bootstrap.servers": bootstrap})
    users = [{"name": f"user-{i}"} for i in range(20)]
    for user in users:
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, value=serializer(user, ctx))
    assert producer.flush(10) == 0
    deserializer = AvroDeserializer(client(url))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got = []
    raw = []
    try:
        while len(got) < len(users):
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} records came back"
            assert msg.error() is None
            raw.append(msg.value())
            got.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    assert got == users
    schema_id = client(url).get_latest_version(f"{topic}-value").schema_id
    # Confluent's wire format: magic byte 0, the schema id big-endian, the Avro body.
    assert all(v[:5] == b"\0" + schema_id.to_bytes(4, "big") for v in raw)


def test_backward_compatibility_refuses_a_breaking_change(registry_broker):
    _, url = registry_broker
    sr = client(url)
    sr.register_schema("acct-value", Schema(USER_V1, "AVRO"))
    assert sr.test_compatibility("acct-value", Schema(USER_V2, "AVRO")) is True
    assert sr.test_compatibility("acct-value", Schema(USER_BREAKING, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("acct-value", Schema(USER_BREAKING, "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    status, body, _ = call(
        f"{url}/compatibility/subjects/acct-value/versions/latest?verbose=true",
        "POST",
        {"schema": USER_BREAKING},
    )
    assert status == 200 and body["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in body["messages"])
    assert sr.get_versions("acct-value") == [1]
    # A subject-level NONE takes it; the global level is untouched.
    assert sr.set_compatibility("acct-value", "NONE") == {"compatibility": "NONE"}
    assert sr.register_schema("acct-value", Schema(USER_BREAKING, "AVRO")) > 0
    assert sr.get_compatibility("acct-value") == "NONE"
    assert sr.get_compatibility() == "BACKWARD"
    status, body, _ = call(f"{url}/config/other-subject")
    assert (status, body["error_code"]) == (404, 40408)
    status, body, _ = call(f"{url}/config/other-subject?defaultToGlobal=true")
    assert (status, body) == (200, {"compatibilityLevel": "BACKWARD"})
    status, body, _ = call(f"{url}/config/acct-value", "DELETE")
    assert (status, body["compatibilityLevel"]) == (200, "NONE")
    with pytest.raises(SchemaRegistryError) as unset:
        sr.get_compatibility("acct-value")
    assert unset.value.error_code == 40408


def test_forward_and_full_levels(registry_broker):
    _, url = registry_broker
    sr = client(url)
    sr.set_compatibility("fwd", "FORWARD")
    sr.register_schema("fwd", Schema(USER_V1, "AVRO"))
    # A required field added: old readers ignore it, so FORWARD takes it.
    assert sr.register_schema("fwd", Schema(USER_BREAKING, "AVRO")) > 0
    sr.set_compatibility("full", "FULL")
    sr.register_schema("full", Schema(USER_V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("full", Schema(USER_BREAKING, "AVRO"))
    assert refused.value.error_code == 409
    assert sr.register_schema("full", Schema(USER_V2, "AVRO")) > 0


def test_soft_and_permanent_deletes(registry_broker):
    _, url = registry_broker
    sr = client(url)
    first = sr.register_schema("del-value", Schema(USER_V1, "AVRO"))
    sr.register_schema("del-value", Schema(USER_V2, "AVRO"))
    status, body, _ = call(f"{url}/subjects/del-value/versions/1?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40407)
    assert sr.delete_version("del-value", 1) == 1
    assert sr.get_versions("del-value") == [2]
    status, body, _ = call(f"{url}/subjects/del-value/versions?deleted=true")
    assert body == [1, 2]
    # A soft-deleted version's schema is still readable by id: old records decode.
    assert json.loads(sr.get_schema(first).schema_str) == json.loads(USER_V1)
    status, body, _ = call(f"{url}/subjects/del-value/versions/1")
    assert (status, body["error_code"]) == (404, 40402)
    status, body, _ = call(f"{url}/subjects/del-value/versions/1?deleted=true")
    assert status == 200 and body["id"] == first
    status, body, _ = call(f"{url}/subjects/del-value?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40405)
    assert sr.delete_subject("del-value") == [2]
    status, body, _ = call(f"{url}/subjects/del-value", "DELETE")
    assert (status, body["error_code"]) == (404, 40404)
    assert sr.get_subjects() == []
    status, body, _ = call(f"{url}/subjects?deleted=true")
    assert body == ["del-value"]
    assert sr.delete_subject("del-value", permanent=True) == [1, 2]
    status, body, _ = call(f"{url}/subjects?deleted=true")
    assert body == []
    status, body, _ = call(f"{url}/schemas/ids/{first}")
    assert (status, body["error_code"]) == (404, 40403)
    # Registered again after the permanent delete: version 1, and a new id (ids grow).
    again = client(url).register_schema("del-value", Schema(USER_V1, "AVRO"))
    assert again > first + 1
    assert client(url).get_latest_version("del-value").version == 1


def test_errors_are_confluents(registry_broker):
    _, url = registry_broker
    client(url).register_schema("e-value", Schema(USER_V1, "AVRO"))
    cases = [
        (f"{url}/subjects/nope/versions", "GET", None, 404, 40401),
        (f"{url}/subjects/e-value/versions/abc", "GET", None, 422, 42202),
        (f"{url}/subjects/e-value/versions/0", "GET", None, 422, 42202),
        (f"{url}/subjects/e-value/versions/99", "GET", None, 404, 40402),
        (f"{url}/schemas/ids/12345", "GET", None, 404, 40403),
        (f"{url}/subjects/e-value/versions", "POST", {"schema": "{not json"}, 422, 42201),
        (f"{url}/subjects/e-value/versions", "POST", {"schema": '{"type":"nope"}'}, 422, 42201),
        (f"{url}/subjects/e-value/versions", "POST", {}, 422, 42201),
        (
            f"{url}/subjects/e-value/versions",
            "POST",
            {"schema": USER_V1, "schemaType": "XML"},
            422,
            42201,
        ),
        (f"{url}/subjects/e-value", "POST", {"schema": USER_V2}, 404, 40403),
        (f"{url}/subjects/nope", "POST", {"schema": USER_V2}, 404, 40401),
        (f"{url}/config", "PUT", {"compatibility": "SIDEWAYS"}, 422, 42203),
        (f"{url}/mode", "PUT", {"mode": "WRITEONLY"}, 422, 42204),
        (f"{url}/nothing/here", "GET", None, 404, 404),
    ]
    for target, method, body, status, code in cases:
        got_status, got, ctype = call(target, method, body)
        assert (got_status, got.get("error_code")) == (status, code), (target, body, got)
        assert ctype == CONTENT_TYPE
        assert got["message"]
    status, body, _ = call(
        f"{url}/subjects/e-value/versions", "POST", raw=b"{", content_type="application/json"
    )
    assert (status, body["error_code"]) == (400, 400)
    status, body, _ = call(
        f"{url}/subjects/e-value/versions", "POST", {"schema": USER_V1}, content_type="text/xml"
    )
    assert (status, body["error_code"]) == (415, 415)
    # Nothing of the refused requests was registered.
    assert client(url).get_versions("e-value") == [1]


def test_modes_readonly_and_import(registry_broker):
    _, url = registry_broker
    sr = client(url)
    sr.register_schema("m-value", Schema(USER_V1, "AVRO"))
    assert sr.update_mode("m-value", "READONLY") == "READONLY"
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("m-value", Schema(USER_V2, "AVRO"))
    assert refused.value.error_code == 42205
    assert sr.get_mode("m-value") == "READONLY"
    assert sr.delete_mode("m-value") == "READONLY"
    assert sr.get_global_mode() == "READWRITE"
    status, body, _ = call(f"{url}/mode", "PUT", {"mode": "IMPORT"})
    assert (status, body["error_code"]) == (422, 42205)
    assert sr.update_global_mode("IMPORT", force=True) == "IMPORT"
    status, body, _ = call(
        f"{url}/subjects/imported/versions", "POST", {"schema": USER_V2, "id": 100, "version": 3}
    )
    assert (status, body) == (200, {"id": 100})
    status, body, _ = call(
        f"{url}/subjects/imported/versions", "POST", {"schema": USER_BREAKING, "id": 100}
    )
    assert (status, body["error_code"]) == (422, 42205)
    assert sr.update_global_mode("READWRITE") == "READWRITE"
    assert client(url).get_version("imported", 3).schema_id == 100
    # Ids keep growing past an imported one.
    assert client(url).register_schema("after-import", Schema(USER_BREAKING, "AVRO")) == 101


def test_references_and_referencedby(registry_broker):
    _, url = registry_broker
    sr = client(url)
    address = json.dumps(
        {
            "type": "record",
            "name": "Address",
            "namespace": "com.acme",
            "fields": [{"name": "city", "type": "string"}],
        }
    )
    customer = json.dumps(
        {
            "type": "record",
            "name": "Customer",
            "namespace": "com.acme",
            "fields": [{"name": "home", "type": "com.acme.Address"}],
        }
    )
    address_id = sr.register_schema("address", Schema(address, "AVRO"))
    with pytest.raises(SchemaRegistryError) as unresolved:
        sr.register_schema("customer", Schema(customer, "AVRO"))
    assert unresolved.value.error_code == 42201
    ref = SchemaReference("com.acme.Address", "address", 1)
    customer_id = sr.register_schema("customer", Schema(customer, "AVRO", [ref]))
    assert customer_id != address_id
    got = client(url).get_schema(customer_id)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("com.acme.Address", "address", 1)
    ]
    assert sr.get_referenced_by("address", 1) == [customer_id]
    status, body, _ = call(f"{url}/subjects/address/versions/1", "DELETE")
    assert (status, body["error_code"]) == (422, 42206)


def test_normalize_gives_one_id_to_equal_schemas(registry_broker):
    _, url = registry_broker
    spaced = json.dumps(json.loads(USER_V1), indent=2)
    status, first, _ = call(
        f"{url}/subjects/n-value/versions?normalize=true", "POST", {"schema": USER_V1}
    )
    status2, again, _ = call(
        f"{url}/subjects/n-value/versions?normalize=true", "POST", {"schema": spaced}
    )
    assert status == status2 == 200
    assert first == again
    assert client(url).get_versions("n-value") == [1]


def test_python_schema_registry_client(registry_broker):
    from schema_registry.client import SchemaRegistryClient as OtherClient
    from schema_registry.client import schema as other_schema

    _, url = registry_broker
    other = OtherClient(url=url)
    schema_id = other.register("py-value", other_schema.AvroSchema(json.loads(USER_V1)))
    assert schema_id == 1
    got = other.get_by_id(schema_id)
    assert got is not None and got.schema["name"] == "User"
    assert other.get_versions("py-value") == [1]
    assert other.test_compatibility("py-value", other_schema.AvroSchema(json.loads(USER_V2)))
    assert other.get_compatibility() == "BACKWARD"


ORDER_PROTO = """syntax = "proto3";
package acme;

message Order {
  string id = 1;
  int64 cents = 2;
}
"""

ORDER_JSON = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "string"}, "cents": {"type": "integer"}},
        "required": ["id"],
        "additionalProperties": False,
    }
)


def produce_and_read(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[bytes] = []
    try:
        while len(out) < len(values):
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def test_json_schema_serializer_through_the_broker(registry_broker):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    bootstrap, url = registry_broker
    topic = topic_name("json")
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(ORDER_JSON, client(url))
    orders = [{"id": f"o{i}", "cents": i * 100} for i in range(10)]
    raw = produce_and_read(bootstrap, topic, [serializer(o, ctx) for o in orders])
    deserializer = JSONDeserializer(ORDER_JSON, schema_registry_client=client(url))
    assert [deserializer(v, ctx) for v in raw] == orders
    latest = client(url).get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"
    # A closed content model: a new property breaks BACKWARD readers.
    widened = json.loads(ORDER_JSON)
    widened["properties"]["note"] = {"type": "string"}
    widened["required"] = ["id", "note"]
    with pytest.raises(SchemaRegistryError) as refused:
        client(url).register_schema(f"{topic}-value", Schema(json.dumps(widened), "JSON"))
    assert refused.value.error_code == 409


def test_protobuf_serializer_through_the_broker(registry_broker):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    from chronik.schemas.formats import parse

    bootstrap, url = registry_broker
    topic = topic_name("proto")
    ctx = SerializationContext(topic, MessageField.VALUE)
    order_class = parse("PROTOBUF", ORDER_PROTO).message_class()  # type: ignore[attr-defined]
    serializer = ProtobufSerializer(order_class, client(url), {"use.deprecated.format": False})
    orders = [order_class(id=f"o{i}", cents=i) for i in range(10)]
    raw = produce_and_read(bootstrap, topic, [serializer(o, ctx) for o in orders])
    deserializer = ProtobufDeserializer(order_class, {"use.deprecated.format": False})
    assert [deserializer(v, ctx) for v in raw] == orders
    latest = client(url).get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # A field's type changed: refused; a field added: taken.
    changed = ORDER_PROTO.replace("int64 cents = 2;", "string cents = 2;")
    with pytest.raises(SchemaRegistryError) as refused:
        client(url).register_schema(f"{topic}-value", Schema(changed, "PROTOBUF"))
    assert refused.value.error_code == 409
    added = ORDER_PROTO.replace("int64 cents = 2;", "int64 cents = 2;\n  string note = 3;")
    assert client(url).register_schema(f"{topic}-value", Schema(added, "PROTOBUF")) > 0


def test_limits_flood_and_huge_schemas(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from chronik.broker.embedded import EmbeddedBroker

    config = {
        "schema.registry.listen": "127.0.0.1:0",
        "schema.registry.max.schemas": "40",
        "schema.registry.max.schema.bytes": "4000",
        "http.max.body.bytes": "20000",
    }
    with EmbeddedBroker(data_dir=tmp_path / "data", config=config) as embedded:
        assert embedded.broker is not None
        url = f"http://127.0.0.1:{embedded.broker.registry_port}"

        def one(n: int) -> tuple[int, Any]:
            status, body, _ = call(
                f"{url}/subjects/flood-{n}/versions",
                "POST",
                {"schema": avro_record(f"F{n}", ("n", "int")), "schemaType": "AVRO"},
            )
            return status, body

        # A flood of registrations from many clients at once: each new schema gets the
        # next id, none twice, and past the limit they are refused, not stored.
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(60)))
        taken = sorted(body["id"] for status, body in results if status == 200)
        refused = [body for status, body in results if status != 200]
        assert taken == list(range(1, 41))
        assert len(refused) == 20
        assert {b["error_code"] for b in refused} == {42205}
        status, subjects, _ = call(f"{url}/schemas")
        assert len(subjects) == 40
        # Schemas already registered are still answered with their ids.
        status, body = one(0)
        assert status == 200 and body["id"] in taken
        big = avro_record("Big", *[(f"field_{i:04d}", "string") for i in range(200)])
        status, body, _ = call(f"{url}/subjects/big/versions", "POST", {"schema": big})
        assert (status, body["error_code"]) == (422, 42201)
        assert "schema.registry.max.schema.bytes" in body["message"]
        status, body, _ = call(
            f"{url}/subjects/big/versions", "POST", raw=b"{" + b" " * 30000 + b"}"
        )
        assert status == 413
        # Junk schemas of every kind: refused, the registry still serves.
        for junk in ("", "[]", "{}", '{"type":"record"}', "x" * 3000, '"' * 10, "[" * 1000):
            for schema_type in ("AVRO", "JSON", "PROTOBUF"):
                status, body, _ = call(
                    f"{url}/subjects/junk/versions",
                    "POST",
                    {"schema": junk, "schemaType": schema_type},
                )
                assert status == 422 and body["error_code"] in (42201, 42205), (junk, body)
        assert call(f"{url}/subjects/junk/versions")[0] == 404
        assert call(f"{url}/schemas/types")[0] == 200


def test_ids_survive_kill_9_and_the_topic_holds_confluents_records(
    broker_process_factory, tmp_path
):
    port = free_port()
    proc = broker_process_factory({"schema.registry.listen": f"127.0.0.1:{port}"})
    wait_for_registry(f"http://127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}"
    sr = client(url)
    first = sr.register_schema("k-value", Schema(USER_V1, "AVRO"))
    second = sr.register_schema("k-value", Schema(USER_V2, "AVRO"))
    sr.set_compatibility("k-value", "FULL")
    sr.delete_version("k-value", 1)
    proc.kill()
    proc.start()
    wait_for_registry(f"http://127.0.0.1:{port}")
    sr = client(url)
    assert sr.get_versions("k-value") == [2]
    assert sr.get_latest_version("k-value").schema_id == second
    assert json.loads(sr.get_schema(first).schema_str) == json.loads(USER_V1)
    assert sr.get_compatibility("k-value") == "FULL"
    third = sr.register_schema("k2-value", Schema(USER_BREAKING, "AVRO"))
    assert third == second + 1
    # The topic holds Confluent Schema Registry's own records.
    consumer = Consumer(
        {"bootstrap.servers": proc.bootstrap, "group.id": "peek", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["_schemas"])
    keys = []
    try:
        while len(keys) < 5:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            keys.append((json.loads(msg.key()), msg.value() and json.loads(msg.value())))
    finally:
        consumer.close()
    assert keys[0] == (
        {"keytype": "SCHEMA", "subject": "k-value", "version": 1, "magic": 1},
        {
            "subject": "k-value",
            "version": 1,
            "id": first,
            "schema": keys[0][1]["schema"],
            "deleted": False,
        },
    )
    assert keys[2] == (
        {"keytype": "CONFIG", "subject": "k-value", "magic": 0},
        {"compatibilityLevel": "FULL"},
    )
    assert keys[3][0]["keytype"] == "SCHEMA" and keys[3][1]["deleted"] is True


def test_a_copied_schemas_topic_is_served_as_it_was(registry_broker, tmp_path):
    """Records copied into _schemas (as from Confluent's or Karapace's topic) are the
    registry's state: ids, versions and configs come across as they were."""
    from chronik.broker.embedded import EmbeddedBroker

    _, url = registry_broker
    sr = client(url)
    ids = [sr.register_schema("copy-value", Schema(s, "AVRO")) for s in (USER_V1, USER_V2)]
    sr.set_compatibility(level="FORWARD")
    source = Consumer(
        {
            "bootstrap.servers": registry_broker[0],
            "group.id": "copy",
            "auto.offset.reset": "earliest",
        }
    )
    source.subscribe(["_schemas"])
    records = []
    try:
        while len(records) < 3:
            msg = source.poll(10)
            assert msg is not None and msg.error() is None
            records.append((msg.key(), msg.value()))
    finally:
        source.close()
    config = {"schema.registry.listen": "127.0.0.1:0"}
    with EmbeddedBroker(data_dir=tmp_path / "copy", config=config) as other:
        assert other.broker is not None
        create_topic(other.bootstrap, "_schemas", **{"cleanup.policy": "compact"})
        producer = Producer({"bootstrap.servers": other.bootstrap})
        for key, value in records:
            producer.produce("_schemas", key=key, value=value)
        assert producer.flush(10) == 0
        other_url = f"http://127.0.0.1:{other.broker.registry_port}"
        copy = client(other_url)
        assert copy.get_versions("copy-value") == [1, 2]
        assert copy.get_latest_version("copy-value").schema_id == ids[1]
        assert copy.get_compatibility() == "FORWARD"
        # Ids go on from the copied ones.
        assert copy.register_schema("new-value", Schema(USER_BREAKING, "AVRO")) == ids[1] + 1


def test_curl_as_confluents_docs_use_it(registry_broker):
    """The calls of Confluent's own quick start, made with curl."""
    import shutil
    import subprocess

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    _, url = registry_broker

    def curl(*args: str) -> Any:
        out = subprocess.run(
            ["curl", "-s", "-H", f"Content-Type: {CONTENT_TYPE}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return json.loads(out.stdout)

    body = json.dumps({"schema": json.dumps({"type": "string"})})
    assert curl("-X", "POST", "--data", body, f"{url}/subjects/Kafka-key/versions") == {"id": 1}
    assert curl("-X", "POST", "--data", body, f"{url}/subjects/Kafka-value/versions") == {"id": 1}
    assert curl(f"{url}/subjects") == ["Kafka-key", "Kafka-value"]
    assert curl(f"{url}/subjects/Kafka-value/versions") == [1]
    assert curl(f"{url}/schemas/ids/1") == {"schema": '"string"'}
    assert curl(f"{url}/subjects/Kafka-value/versions/1") == {
        "subject": "Kafka-value",
        "version": 1,
        "id": 1,
        "schema": '"string"',
    }
    assert curl("-X", "DELETE", f"{url}/subjects/Kafka-value/versions/1") == 1
    assert curl(
        "-X",
        "POST",
        "--data",
        body,
        f"{url}/compatibility/subjects/Kafka-key/versions/latest",
    ) == {"is_compatible": True}
    assert curl("-X", "PUT", "--data", '{"compatibility": "NONE"}', f"{url}/config") == {
        "compatibility": "NONE"
    }
    assert curl(f"{url}/config") == {"compatibilityLevel": "NONE"}


def test_protobuf_and_json_references(registry_broker):
    _, url = registry_broker
    sr = client(url)
    money = 'syntax = "proto3";\npackage acme;\nmessage Money { int64 cents = 1; }\n'
    sr.register_schema("money.proto", Schema(money, "PROTOBUF"))
    order = (
        'syntax = "proto3";\npackage acme;\nimport "money.proto";\n'
        "message Order { string id = 1; Money total = 2; }\n"
    )
    with pytest.raises(SchemaRegistryError) as missing:
        sr.register_schema("order-value", Schema(order, "PROTOBUF"))
    assert missing.value.error_code == 42201
    ref = SchemaReference("money.proto", "money.proto", 1)
    order_id = sr.register_schema("order-value", Schema(order, "PROTOBUF", [ref]))
    assert sr.get_referenced_by("money.proto", 1) == [order_id]

    address = json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    )
    sr.register_schema("address.json", Schema(address, "JSON"))
    person = json.dumps(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
        }
    )
    person_ref = SchemaReference("address.json", "address.json", 1)
    person_id = sr.register_schema("person-value", Schema(person, "JSON", [person_ref]))
    got = client(url).get_schema(person_id)
    assert got.schema_type == "JSON"
    assert [r.name for r in got.references] == ["address.json"]
