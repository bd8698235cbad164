"""The records of the ``_schemas`` topic, in Confluent Schema Registry's format (which
Karapace writes too), so a registry's data moves between them by copying the topic.

Keys and values are UTF-8 JSON; a null value is a tombstone.

  SCHEMA          {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
                  {"subject":S,"version":V,"id":ID,"schemaType":"JSON"|"PROTOBUF" (absent:
                  AVRO),"references":[{"name","subject","version"}] (may be absent),
                  "schema":TEXT,"deleted":bool}
                  null: version V of S permanently deleted
  CONFIG          {"keytype":"CONFIG","subject":S|null,"magic":0}
                  {"compatibilityLevel":LEVEL, "normalize":bool (may be absent)}; null:
                  the subject's config removed (the global one: back to the default)
  MODE            {"keytype":"MODE","subject":S|null,"magic":0}  {"mode":MODE}; null: removed
  DELETE_SUBJECT  {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}
                  {"subject":S,"version":V}: every version up to V soft-deleted
  NOOP            {"keytype":"NOOP","magic":0}  null: written to learn the log's end

Confluent serializes a key's fields in the order shown; its readers match keys by
value, so the order only matters to the compaction of records written by both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
DELETE_SUBJECT = "DELETE_SUBJECT"
NOOP = "NOOP"
KEYTYPES = (SCHEMA, CONFIG, MODE, DELETE_SUBJECT, NOOP)


class BadRecord(ValueError):
    """A record of the topic that is not in the format; a reader skips it."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaValue:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dump({"keytype": SCHEMA, "subject": subject, "version": version, "magic": 1})


def schema_value(value: SchemaValue) -> bytes:
    out: dict[str, Any] = {
        "subject": value.subject,
        "version": value.version,
        "id": value.schema_id,
    }
    if value.schema_type != "AVRO":
        out["schemaType"] = value.schema_type
    if value.references:
        out["references"] = [r.to_json() for r in value.references]
    out["schema"] = value.schema
    out["deleted"] = value.deleted
    return _dump(out)


def config_key(subject: str | None) -> bytes:
    return _dump({"keytype": CONFIG, "subject": subject, "magic": 0})


def config_value(level: str, normalize: bool | None = None) -> bytes:
    out: dict[str, Any] = {"compatibilityLevel": level}
    if normalize is not None:
        out["normalize"] = normalize
    return _dump(out)


def mode_key(subject: str | None) -> bytes:
    return _dump({"keytype": MODE, "subject": subject, "magic": 0})


def mode_value(mode: str) -> bytes:
    return _dump({"mode": mode})


def delete_subject_key(subject: str) -> bytes:
    return _dump({"keytype": DELETE_SUBJECT, "subject": subject, "magic": 0})


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dump({"subject": subject, "version": version})


def noop_key() -> bytes:
    return _dump({"keytype": NOOP, "magic": 0})


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRecord(f"{what} is not JSON: {exc}") from None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{what} is not an integer: {value!r}")
    return value


def _subject(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadRecord(f"{what} is not a string: {value!r}")
    return value


def parse_key(data: bytes) -> Key:
    obj = _json(data, "key")
    if not isinstance(obj, dict):
        raise BadRecord("key is not a JSON object")
    keytype = obj.get("keytype")
    if keytype not in KEYTYPES:
        raise BadRecord(f"unknown keytype {keytype!r}")
    subject = obj.get("subject")
    if subject is not None:
        subject = _subject(subject, "key subject")
    version = obj.get("version")
    if keytype == SCHEMA:
        if subject is None:
            raise BadRecord("SCHEMA key without a subject")
        version = _int(version, "key version")
    elif keytype == DELETE_SUBJECT and subject is None:
        raise BadRecord("DELETE_SUBJECT key without a subject")
    return Key(keytype, subject, version if keytype == SCHEMA else None)


def parse_value(data: bytes | None) -> dict[str, Any] | None:
    if data is None or data == b"":
        return None
    obj = _json(data, "value")
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise BadRecord("value is not a JSON object")
    return obj


def parse_schema_value(obj: dict[str, Any]) -> SchemaValue:
    refs = obj.get("references") or []
    if not isinstance(refs, list):
        raise BadRecord("references is not a list")
    references: list[Reference] = []
    for ref in refs:
        if not isinstance(ref, dict):
            raise BadRecord("a reference is not an object")
        references.append(
            Reference(
                _subject(ref.get("name"), "reference name"),
                _subject(ref.get("subject"), "reference subject"),
                _int(ref.get("version"), "reference version"),
            )
        )
    schema_type = obj.get("schemaType") or "AVRO"
    schema = obj.get("schema")
    if not isinstance(schema, str):
        raise BadRecord("schema is not a string")
    return SchemaValue(
        subject=_subject(obj.get("subject"), "subject"),
        version=_int(obj.get("version"), "version"),
        schema_id=_int(obj.get("id"), "id"),
        schema_type=str(schema_type),
        schema=schema,
        references=tuple(references),
        deleted=bool(obj.get("deleted", False)),
    )
