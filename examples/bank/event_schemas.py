"""The bank events' Avro schemas (schemas/account_event_v*.avsc) in the schema registry.

One record, ``bank.AccountEvent``, with a ``type`` enum and optional fields, registered
under the events topic's ``<topic>-value`` subject (TopicNameStrategy). One record rather
than a union of one record per event type: a key's events stay in one ordered topic under
one subject, Spark reads them as one struct column with the same fields for every type
(a union would be a struct of member0..member3), and the event store's JSON appends need
no union branch names. Version 2 adds ``channel`` with the default "branch", so events
written under version 1 read as version 2 with that default.
"""

from __future__ import annotations

from pathlib import Path

SCHEMAS = Path(__file__).resolve().parent / "schemas"
VERSIONS = (1, 2)
LATEST = VERSIONS[-1]


def schema_text(version: int) -> str:
    return (SCHEMAS / f"account_event_v{version}.avsc").read_text()


def subject(topic: str) -> str:
    return f"{topic}-value"


def client(registry_url: str):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": registry_url})


def register(registry_url: str, topic: str, version: int) -> int:
    """Register the schema's ``version`` under the topic's subject, after checking it is
    compatible with what the subject holds (a refusal raises, naming why); its schema id."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    registry = client(registry_url)
    schema = Schema(schema_text(version), "AVRO")
    name = subject(topic)
    try:
        registry.get_latest_version(name)
        has_versions = True
    except SchemaRegistryError as exc:
        if exc.error_code != 40401:  # subject not found: nothing to be compatible with
            raise
        has_versions = False
    if has_versions and not registry.test_compatibility(name, schema):
        raise SystemExit(
            f"{SCHEMAS.name}/account_event_v{version}.avsc is not compatible "
            f"with the latest schema of {name}"
        )
    return registry.register_schema(name, schema)


def register_all(registry_url: str, topic: str) -> int:
    """Every version in order (already registered ones keep their ids); the latest's id."""
    schema_id = 0
    for version in VERSIONS:
        schema_id = register(registry_url, topic, version)
    return schema_id


def serializer(registry_url: str, version: int):
    """confluent-kafka's AvroSerializer writing with the schema's ``version``, which must
    be registered already (it is looked up, not registered)."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(
        client(registry_url), schema_text(version), conf={"auto.register.schemas": False}
    )
