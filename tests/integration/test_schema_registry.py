"""The schema registry a broker serves, driven by confluent-kafka's SchemaRegistryClient
and its Avro serializers, by python-schema-registry-client, and by raw HTTP where the
status, Confluent's error code or the content type is what is checked."""

from __future__ import annotations

import json
from collections.abc import Iterator

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

from .helpers import create_topic, topic_name
from .registry_support import CONTENT_TYPE, avro_record, call

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
