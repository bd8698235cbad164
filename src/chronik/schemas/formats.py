"""The formats by Confluent's ``schemaType`` name. Each is imported when first asked for:
the Protobuf one brings protoc, which a broker that never sees a .proto need not load."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from .types import SCHEMA_TYPES, Format, ParsedSchema, SchemaError

_MODULES = {"AVRO": "avro", "JSON": "json_schema", "PROTOBUF": "protobuf"}
_loaded: dict[str, Format] = {}


def format_of(schema_type: str) -> Format:
    if schema_type not in SCHEMA_TYPES:
        raise SchemaError(f"unknown schema type {schema_type!r}")
    found = _loaded.get(schema_type)
    if found is None:
        module = importlib.import_module(f"chronik.schemas.{_MODULES[schema_type]}")
        found = _loaded[schema_type] = module.FORMAT
    return found


def parse(schema_type: str, text: str, references: Mapping[str, str] | None = None) -> ParsedSchema:
    """Parse ``text`` as a schema of ``schema_type``; SchemaError when it is not one."""
    return format_of(schema_type).parse(text, references or {})
