"""Confluent's JavaScript Schema Registry client (npm @confluentinc/schemaregistry, its
AvroSerializer and AvroDeserializer) against the registry a broker serves, with records
crossing languages: Node writes and Python reads, Python writes and Node reads.

The script is tests/compat/schemaregistry_avro.js; `npm ci` in tests/compat
(scripts/install-test-deps.sh) provides the package. Java's KafkaAvroSerializer is not
tested: Confluent publishes it only to its own Maven repository, which this machine
cannot reach, and no PyPI or npm package carries its jar."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .helpers import create_topic, topic_name
from .test_schema_registry import registry_broker  # noqa: F401  (the fixture)

COMPAT = Path(__file__).resolve().parents[1] / "compat"
SCRIPT = COMPAT / "schemaregistry_avro.js"
PAYMENT = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bank",
        "fields": [{"name": "account", "type": "string"}, {"name": "cents", "type": "long"}],
    }
)

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (COMPAT / "node_modules" / "@confluentinc" / "schemaregistry").is_dir(),
        reason="@confluentinc/schemaregistry missing: run `npm ci` in tests/compat",
    ),
]


def test_javascript_serializers_and_python_read_each_others_records(registry_broker):  # noqa: F811
    bootstrap, url = registry_broker
    topic = topic_name("js-avro")
    create_topic(bootstrap, topic)
    ctx = SerializationContext(topic, MessageField.VALUE)
    # Python writes first, with the schema Node registers again: the same id.
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), PAYMENT)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(topic, value=serializer({"account": f"py-{i}", "cents": i}, ctx))
    assert producer.flush(10) == 0

    run = subprocess.run(
        ["node", str(SCRIPT), url, bootstrap, topic, "5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=COMPAT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["versions"] == [1]
    python_id = SchemaRegistryClient({"url": url}).get_latest_version(f"{topic}-value").schema_id
    assert out["id"] == python_id
    # Node read Python's records and its own.
    assert out["got"] == [{"account": f"py-{i}", "cents": i} for i in range(3)] + [
        {"account": f"js-{i}", "cents": i * 100} for i in range(5)
    ]
    # Python reads Node's records.
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < 8:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            got.append(deserializer(msg.value(), ctx))
    finally:
        consumer.close()
    assert got[3:] == [{"account": f"js-{i}", "cents": i * 100} for i in range(5)]
