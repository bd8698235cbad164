"""Broker-side schema validation (confluent.value.schema.validation,
confluent.key.schema.validation and their subject name strategies) with real clients:
confluent-kafka's Producer and Avro serializers, its AdminClient, and raw Produce
requests where the response's record_errors are what is checked."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kio.schema.produce.v9 import request as produce

from chronik.records.builder import Record, build_batch
from chronik.records.compression import LZ4
from chronik.schemas import framing

from .helpers import RawClient, create_topic, topic_name
from .registry_support import call

INVALID_RECORD = 87
TIMEOUT = 30
VALUE_ON = {"confluent.value.schema.validation": "true"}
KEY_ON = {"confluent.key.schema.validation": "true"}
USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "com.acme",
        "fields": [{"name": "name", "type": "string"}],
    }
)
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})


def _header(schema_id: int, indexes: list[int] | None = None) -> bytes:
    """Confluent's header: magic byte, schema id and (Protobuf) the message indexes."""
    return framing.frame(schema_id, b"" if indexes is None else framing.message_indexes(indexes))


def _schema_id(value: bytes) -> int:
    framed = framing.unframe(value)
    assert framed is not None
    return framed[0]


def _embedded(tmp_path, config: dict[str, str]) -> Iterator[Any]:
    from chronik.broker.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(data_dir=tmp_path / "data", config=config)
    embedded.start()
    try:
        assert embedded.broker is not None
        yield embedded
    finally:
        embedded.close()


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(bootstrap, registry URL) of an embedded broker serving the registry."""
    tmp = tmp_path_factory.mktemp("validation")
    for embedded in _embedded(tmp, {"schema.registry.listen": "127.0.0.1:0"}):
        yield embedded.bootstrap, f"http://127.0.0.1:{embedded.broker.registry_port}"


def _register(url: str, subject: str, text: str, schema_type: str = "AVRO") -> int:
    body: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    status, answer, _ = call(f"{url}/subjects/{subject}/versions", "POST", body)
    assert status == 200, answer
    return int(answer["id"])


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "validation-end"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def _produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    **conf: Any,
) -> list[KafkaError | None]:
    """The delivery error (or None) of each record, all sent in one batch."""
    results: list[KafkaError | None] = [None] * len(records)

    def delivered(i: int):
        return lambda err, msg: results.__setitem__(i, err)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, **conf})
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered(i))
    assert producer.flush(TIMEOUT) == 0
    return results


def _one(bootstrap: str, topic: str, value: bytes | None, key: bytes | None = None):
    (err,) = _produce(bootstrap, topic, [(key, value)])
    return err


def _refusal(bootstrap: str, topic: str, value: bytes | None, key: bytes | None = None) -> str:
    """The reason kafka-python's producer shows for a refused record (its InvalidRecordError
    carries the broker's record error), with confluent-kafka's delivery error code checked
    on the same record: INVALID_RECORD."""
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    err = _one(bootstrap, topic, value, key)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, (value, err)
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        with pytest.raises(InvalidRecordError) as info:
            producer.send(topic, value=value, key=key, partition=0).get(TIMEOUT)
    finally:
        producer.close()
    return str(info.value)


def _avro(url: str, schema: str, topic: str, field: MessageField, obj: Any, **conf: Any) -> bytes:
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), schema, conf=conf or None)
    return serializer(obj, SerializationContext(topic, field))


def _raw_produce(bootstrap: str, topic: str, batch: bytes) -> Any:
    with RawClient(bootstrap) as raw:
        request = produce.ProduceRequest(
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                produce.TopicProduceData(
                    name=topic,
                    partition_data=(produce.PartitionProduceData(index=0, records=batch),),
                ),
            ),
        )
        (part,) = raw.request(request).responses[0].partition_responses
        return part


def test_avro_serializer_values_are_taken_and_read_back(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("valid")
    create_topic(bootstrap, topic, **VALUE_ON)
    users = [{"name": f"user-{i}"} for i in range(50)]
    values = [_avro(url, USER, topic, MessageField.VALUE, u) for u in users]
    # A tombstone (null value) passes too.
    errs = _produce(bootstrap, topic, [(b"k", v) for v in values] + [(b"k", None)])
    assert errs == [None] * (len(users) + 1)
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < len(users) + 1:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} records came back"
            assert msg.error() is None
            value = msg.value()
            ctx = SerializationContext(topic, MessageField.VALUE)
            got.append(None if value is None else deserializer(value, ctx))
    finally:
        consumer.close()
    assert got == [*users, None]


def test_values_without_a_registered_id_are_refused_with_the_reason(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("refused")
    create_topic(bootstrap, topic, **VALUE_ON)
    good = _avro(url, USER, topic, MessageField.VALUE, {"name": "a"})
    assert _one(bootstrap, topic, good) is None
    end = _end_offset(bootstrap, topic)
    assert end == 1
    elsewhere = _register(url, "some-other-subject", ORDER)
    cases = {
        b"plain text": "no magic byte",
        b"\x00\x01": "no magic byte",
        b"": "no magic byte",
        b"\x01" + good[1:]: "no magic byte",
        _header(999_999) + b"\x02a": "unknown schema id 999999",
        _header(elsewhere) + b"\x02": (
            f"schema id {elsewhere} is not registered under subject '{topic}-value'"
        ),
    }
    for value, why in cases.items():
        reason = _refusal(bootstrap, topic, value)
        assert why in reason, (value, reason)
    assert _end_offset(bootstrap, topic) == end


def test_raw_produce_names_each_bad_record_and_writes_nothing(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("raw")
    create_topic(bootstrap, topic, **VALUE_ON)
    good = _avro(url, USER, topic, MessageField.VALUE, {"name": "b"})
    values = [good, b"junk", good, None, _header(424242) + b"x", good]
    batch = build_batch([Record(1000 + i, None, v) for i, v in enumerate(values)])
    part = _raw_produce(bootstrap, topic, batch)
    assert int(part.error_code) == INVALID_RECORD
    errors = {int(e.batch_index): e.batch_index_error_message for e in part.record_errors}
    assert sorted(errors) == [1, 4]
    assert "value: no magic byte" in errors[1]
    assert errors[4] == "value: unknown schema id 424242"
    assert "2 record errors" in part.error_message
    assert _end_offset(bootstrap, topic) == 0
    # The same batch less its bad records is taken.
    batch = build_batch([Record(1000 + i, None, v) for i, v in enumerate([good, None, good])])
    assert int(_raw_produce(bootstrap, topic, batch).error_code) == 0
    assert _end_offset(bootstrap, topic) == 3


def test_keys_are_validated_against_the_key_subject(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("keys")
    create_topic(bootstrap, topic, **KEY_ON)
    key = _avro(url, USER, topic, MessageField.KEY, {"name": "k"})
    as_value = _avro(url, ORDER, topic, MessageField.VALUE, {"id": 1})
    # Values are not checked; a null key passes.
    errs = _produce(bootstrap, topic, [(key, b"anything"), (None, b"no key")])
    assert errs == [None, None]
    # An id registered under <topic>-value only is not a key's.
    reason = _refusal(bootstrap, topic, b"v", key=as_value)
    expected = f"schema id {_schema_id(as_value)} is not registered under subject "
    assert f"key: {expected}'{topic}-key'" in reason
    assert "key: no magic byte" in _refusal(bootstrap, topic, b"v", key=b"plain")
    assert _end_offset(bootstrap, topic) == 2


def test_both_key_and_value_checked_name_both_in_one_record_error(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("both")
    create_topic(bootstrap, topic, **KEY_ON, **VALUE_ON)
    key = _avro(url, USER, topic, MessageField.KEY, {"name": "k"})
    value = _avro(url, ORDER, topic, MessageField.VALUE, {"id": 2})
    assert _one(bootstrap, topic, value, key=key) is None
    batch = build_batch([Record(1, key, value), Record(2, b"bad key", b"bad value")])
    part = _raw_produce(bootstrap, topic, batch)
    assert int(part.error_code) == INVALID_RECORD
    (error,) = part.record_errors
    assert int(error.batch_index) == 1
    assert "key: no magic byte" in error.batch_index_error_message
    assert "value: no magic byte" in error.batch_index_error_message
    assert _end_offset(bootstrap, topic) == 1


@pytest.mark.parametrize(
    ("strategy", "serializer_strategy", "subject"),
    [
        ("RecordNameStrategy", "record", "com.acme.User"),
        (
            "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
            "topic_record",
            "{topic}-com.acme.User",
        ),
    ],
)
def test_record_name_strategies(registry_broker, strategy, serializer_strategy, subject):
    from confluent_kafka.schema_registry import (
        record_subject_name_strategy,
        topic_record_subject_name_strategy,
    )

    bootstrap, url = registry_broker
    topic = topic_name("strategy")
    create_topic(
        bootstrap, topic, **VALUE_ON, **{"confluent.value.subject.name.strategy": strategy}
    )
    name_strategy = {
        "record": record_subject_name_strategy,
        "topic_record": topic_record_subject_name_strategy,
    }[serializer_strategy]
    value = _avro(
        url,
        USER,
        topic,
        MessageField.VALUE,
        {"name": "r"},
        **{"subject.name.strategy": name_strategy},
    )
    subject = subject.format(topic=topic)
    status, versions, _ = call(f"{url}/subjects/{subject}/versions")
    assert status == 200 and versions, versions
    assert _one(bootstrap, topic, value) is None
    # The same schema under the topic's TopicNameStrategy subject only: refused here.
    other = _register(url, f"{topic}-value", ORDER)
    reason = _refusal(bootstrap, topic, _header(other) + b"\x02")
    assert f"not registered under subject '{subject.replace('com.acme.User', 'Order')}'" in reason
    assert _end_offset(bootstrap, topic) == 1


def test_a_compressed_batch_with_one_bad_record_is_refused_whole(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("lz4")
    create_topic(bootstrap, topic, **VALUE_ON)
    good = [_avro(url, USER, topic, MessageField.VALUE, {"name": f"u{i}"}) for i in range(30)]
    records: list[tuple[bytes | None, bytes | None]] = [(None, v) for v in good]
    records.insert(17, (None, b"not framed"))
    errs = _produce(bootstrap, topic, records, **{"compression.type": "lz4"})
    assert errs[17] is not None and errs[17].code() == KafkaError.INVALID_RECORD
    for i, err in enumerate(errs):
        assert err is not None, i  # the whole batch failed
    assert _end_offset(bootstrap, topic) == 0
    # A raw lz4 batch too, and once good it is taken.
    bad = build_batch([Record(1, None, v) for v in [*good[:3], b"x"]], compression=LZ4)
    part = _raw_produce(bootstrap, topic, bad)
    assert int(part.error_code) == INVALID_RECORD
    assert [int(e.batch_index) for e in part.record_errors] == [3]
    assert _produce(bootstrap, topic, [(None, v) for v in good], **{"compression.type": "lz4"}) == [
        None
    ] * len(good)
    assert _end_offset(bootstrap, topic) == len(good)


def test_a_topic_without_the_config_takes_anything(registry_broker):
    bootstrap, _ = registry_broker
    topic = topic_name("plain")
    create_topic(bootstrap, topic)
    values = [b"plain", b"", None, _header(31337) + b"x"]
    assert _produce(bootstrap, topic, [(None, v) for v in values]) == [None] * len(values)
    assert _end_offset(bootstrap, topic) == len(values)


def _describe(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def test_configs_are_described_switched_on_by_alter_configs_and_checked(registry_broker):
    bootstrap, url = registry_broker
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = topic_name("alter")
    create_topic(bootstrap, topic)
    described = _describe(admin, topic)
    assert described["confluent.value.schema.validation"].value == "false"
    assert described["confluent.key.schema.validation"].value == "false"
    assert (
        described["confluent.value.subject.name.strategy"].value
        == "io.confluent.kafka.serializers.subject.TopicNameStrategy"
    )
    assert _one(bootstrap, topic, b"junk") is None

    entries = [
        ConfigEntry(
            "confluent.value.schema.validation", "true", incremental_operation=AlterConfigOpType.SET
        )
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    described = _describe(admin, topic)
    assert described["confluent.value.schema.validation"].value == "true"
    assert not described["confluent.value.schema.validation"].is_default
    err = _one(bootstrap, topic, b"junk")
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert (
        _one(bootstrap, topic, _avro(url, USER, topic, MessageField.VALUE, {"name": "x"})) is None
    )
    assert _end_offset(bootstrap, topic) == 2

    # An unknown strategy is refused, at alter and at create time.
    entries = [
        ConfigEntry(
            "confluent.value.subject.name.strategy",
            "MyStrategy",
            incremental_operation=AlterConfigOpType.SET,
        )
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    bad = NewTopic(
        topic_name("badstrategy"),
        1,
        1,
        config={"confluent.key.subject.name.strategy": "com.example.Mine"},
    )
    with pytest.raises(KafkaException) as info:
        admin.create_topics([bad])[bad.topic].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    bad = NewTopic(topic_name("badbool"), 1, 1, config={"confluent.value.schema.validation": "1"})
    with pytest.raises(KafkaException) as info:
        admin.create_topics([bad])[bad.topic].result(timeout=TIMEOUT)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_soft_deleted_versions_count_hard_deleted_do_not(registry_broker):
    bootstrap, url = registry_broker
    topic = topic_name("deleted")
    create_topic(bootstrap, topic, **VALUE_ON)
    subject = f"{topic}-value"
    schema_id = _register(url, subject, ORDER)
    value = _header(schema_id) + b"\x02"
    assert _one(bootstrap, topic, value) is None
    status, _, _ = call(f"{url}/subjects/{subject}/versions/1", "DELETE")
    assert status == 200
    assert _one(bootstrap, topic, value) is None
    status, _, _ = call(f"{url}/subjects/{subject}/versions/1?permanent=true", "DELETE")
    assert status == 200
    err = _one(bootstrap, topic, value)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    assert _end_offset(bootstrap, topic) == 2


PROTO = """
syntax = "proto3";
package shop;
message Cart { string id = 1; }
message Item { string sku = 1; message Price { int64 cents = 1; } }
"""


def test_protobuf_message_indexes_name_the_record(registry_broker):
    """RecordNameStrategy with a Protobuf schema: the subject is the message the record's
    message indexes point at ([1] Item, [1, 0] Item.Price, [0] or a single 0 byte Cart)."""
    bootstrap, url = registry_broker
    topic = topic_name("proto")
    create_topic(
        bootstrap,
        topic,
        **VALUE_ON,
        **{"confluent.value.subject.name.strategy": "RecordNameStrategy"},
    )
    schema_id = _register(url, "shop.Item", PROTO, "PROTOBUF")
    assert _register(url, "shop.Item.Price", PROTO, "PROTOBUF") == schema_id
    values = [_header(schema_id, [1]) + b"", _header(schema_id, [1, 0]) + b"\x08\x01"]
    assert _produce(bootstrap, topic, [(None, v) for v in values]) == [None, None]
    cart = _header(schema_id, [0])
    assert cart.endswith(b"\x00")
    batch = build_batch([Record(1, None, v) for v in [values[0], cart, _header(schema_id, [7])]])
    part = _raw_produce(bootstrap, topic, batch)
    assert int(part.error_code) == INVALID_RECORD
    errors = {int(e.batch_index): e.batch_index_error_message for e in part.record_errors}
    assert errors[1] == f"value: schema id {schema_id} is not registered under subject 'shop.Cart'"
    assert "invalid message indexes [7]" in errors[2]
    assert sorted(errors) == [1, 2]
    assert _end_offset(bootstrap, topic) == 2


def test_a_broker_without_the_registry_refuses_opted_in_topics(tmp_path):
    for embedded in _embedded(tmp_path, {}):
        bootstrap = embedded.bootstrap
        topic = topic_name("noregistry")
        create_topic(bootstrap, topic, **VALUE_ON)
        err = _one(bootstrap, topic, _header(1) + b"x")
        assert err is not None and err.code() == KafkaError.INVALID_RECORD
        part = _raw_produce(bootstrap, topic, build_batch([Record(1, None, b"v")]))
        assert int(part.error_code) == INVALID_RECORD
        assert "schema.registry.listen is needed" in part.error_message
        assert "confluent.value.schema.validation" in part.error_message
        plain = topic_name("plain")
        create_topic(bootstrap, plain)
        assert _one(bootstrap, plain, b"anything") is None
        assert _end_offset(bootstrap, topic) == 0


def test_an_id_this_broker_has_not_read_yet_is_caught_up_before_refusing(registry_broker):
    """A schema record appended to _schemas and, in the same Produce request, a record
    with its id: the handler appends the first, and the check of the second finds the id
    unknown to the registry (which has not read the record: nothing ran in between), lets
    it catch up once, and takes the record. An id still unknown after that is refused."""
    from chronik.registry import topic_format as fmt

    bootstrap, url = registry_broker
    topic = topic_name("catchup")
    create_topic(bootstrap, topic, **VALUE_ON)
    subject = f"{topic}-value"
    _register(url, f"{topic}-other", ORDER)  # _schemas exists, with a leader
    schema_id = 7_000_001
    value = fmt.SchemaValue(subject, 1, schema_id, "AVRO", ORDER)
    schemas_batch = build_batch([Record(1, fmt.schema_key(subject, 1), fmt.schema_value(value))])
    records = build_batch([Record(2, None, _header(schema_id) + b"\x02"), Record(3, None, None)])
    with RawClient(bootstrap) as raw:
        request = produce.ProduceRequest(
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                produce.TopicProduceData(
                    name="_schemas",
                    partition_data=(produce.PartitionProduceData(index=0, records=schemas_batch),),
                ),
                produce.TopicProduceData(
                    name=topic,
                    partition_data=(produce.PartitionProduceData(index=0, records=records),),
                ),
            ),
        )
        answers = raw.request(request).responses
    codes = {t.name: [int(p.error_code) for p in t.partition_responses] for t in answers}
    assert codes == {"_schemas": [0], topic: [0]}
    assert _end_offset(bootstrap, topic) == 2
    status, got, _ = call(f"{url}/schemas/ids/{schema_id}")
    assert status == 200, got
    part = _raw_produce(bootstrap, topic, build_batch([Record(4, None, _header(7_000_002))]))
    assert int(part.error_code) == INVALID_RECORD
    assert part.record_errors[0].batch_index_error_message == "value: unknown schema id 7000002"


def test_json_schema_titles_name_the_record(registry_broker):
    """TopicRecordNameStrategy with JSON Schema: confluent-kafka's JSONSerializer registers
    under <topic>-<title>, and the broker looks there; a schema without a title names no
    record, so its records are refused."""
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    bootstrap, url = registry_broker
    topic = topic_name("jsonschema")
    create_topic(
        bootstrap,
        topic,
        **VALUE_ON,
        **{"confluent.value.subject.name.strategy": "TopicRecordNameStrategy"},
    )
    schema = json.dumps(
        {
            "title": "Payment",
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
        }
    )
    serializer = JSONSerializer(
        schema,
        SchemaRegistryClient({"url": url}),
        conf={"subject.name.strategy": topic_record_subject_name_strategy},
    )
    value = serializer({"amount": 5}, SerializationContext(topic, MessageField.VALUE))
    status, versions, _ = call(f"{url}/subjects/{topic}-Payment/versions")
    assert status == 200 and versions == [1], versions
    assert _one(bootstrap, topic, value) is None
    untitled = _register(url, f"{topic}-value", json.dumps({"type": "object"}), "JSON")
    reason = _refusal(bootstrap, topic, _header(untitled) + b"{}")
    assert (
        f"value: schema id {untitled} (JSON) names no record for TopicRecordNameStrategy" in reason
    )
    assert _end_offset(bootstrap, topic) == 1
