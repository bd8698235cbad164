"""Confluent's subject name strategies: which registry subject a record's schema must be
registered under, from the topic, whether it is the key or the value, and the record's
fully-qualified name.

- TopicNameStrategy (the default): ``<topic>-key`` / ``<topic>-value``;
- RecordNameStrategy: the record's fully-qualified name;
- TopicRecordNameStrategy: ``<topic>-<fully-qualified name>``.

A strategy is named by its Java class, ``io.confluent.kafka.serializers.subject.`` and the
class name, or by the class name alone. The fully-qualified name is the Avro schema's full
name (a named type's namespace and name), the JSON Schema's ``title``, or the Protobuf
message the record's message indexes point at (chronik.schemas.protobuf.message_name).
"""

from __future__ import annotations

import json

PACKAGE = "io.confluent.kafka.serializers.subject."
TOPIC_NAME = "TopicNameStrategy"
RECORD_NAME = "RecordNameStrategy"
TOPIC_RECORD_NAME = "TopicRecordNameStrategy"
STRATEGIES = (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME)
DEFAULT_STRATEGY = PACKAGE + TOPIC_NAME
# Avro types whose schema has a name of its own.
_NAMED_AVRO = ("record", "enum", "fixed", "error")


def strategy_name(configured: str) -> str | None:
    """The strategy's class name (TopicNameStrategy, ...), or None if it names none."""
    name = configured.strip().removeprefix(PACKAGE)
    return name if name in STRATEGIES else None


def uses_record_name(strategy: str) -> bool:
    return strategy != TOPIC_NAME


def subject(strategy: str, topic: str, is_key: bool, record_name: str | None = None) -> str:
    """The subject of a record under ``strategy`` (a class name from STRATEGIES); the record
    strategies need the record's fully-qualified name."""
    if strategy == TOPIC_NAME:
        return f"{topic}-key" if is_key else f"{topic}-value"
    if record_name is None:
        raise ValueError(f"{strategy} needs the record's fully-qualified name")
    return record_name if strategy == RECORD_NAME else f"{topic}-{record_name}"


def record_name(schema_type: str, text: str) -> str | None:
    """The fully-qualified name an Avro or JSON schema gives its records (None when it gives
    none: an Avro schema of an unnamed type, a JSON Schema without a title, a schema that is
    not JSON). Protobuf names its message per record (the message indexes), not here."""
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if schema_type == "JSON":
        title = schema.get("title") if isinstance(schema, dict) else None
        return title if isinstance(title, str) and title else None
    if schema_type != "AVRO":
        return None
    if isinstance(schema, str):  # a named type referenced by its name
        return schema or None
    if not isinstance(schema, dict) or schema.get("type") not in _NAMED_AVRO:
        return None
    name = schema.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = schema.get("namespace")
    if "." in name or not isinstance(namespace, str) or not namespace:
        return name
    return f"{namespace}.{name}"
