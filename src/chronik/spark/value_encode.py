"""The sink's schema'd keys and values: a typed column encoded in Confluent's wire format.

Each row's subject is ``<column>Subject`` or its topic's (``<topic>-value``); its schema is
the subject's chosen version (``<column>SchemaVersion``, default latest) or, with
``autoRegisterSchema=true``, the Avro schema derived from the column's Spark type,
registered under the subject (or found there). A row whose value does not fit the schema
fails the write with the row's topic and the reason; nothing of the task is sent.
"""

from __future__ import annotations

import base64
import decimal
import json
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from chronik.schemas import framing
from chronik.schemas.types import SchemaError, ValueMismatch
from chronik.spark.options import OptionError
from chronik.spark.registry_client import client_for
from chronik.spark.schema_options import ColumnFormat, SchemaOptions, subject_schema
from chronik.spark.schema_types import json_default

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EncodeError(ValueError):
    pass


# -- the Avro schema of a Spark type (autoRegisterSchema) -------------------------------------


def avro_schema_of(dtype: DataType, name: str) -> dict[str, Any] | str:
    """Avro schema of a Spark type: nullable fields become ``["null", T]`` with default
    null, records are named after their path from ``name``."""
    return _avro(dtype, name)


def _nullable(schema: Any) -> list[Any]:
    return ["null", schema]


def _avro(dtype: DataType, name: str) -> Any:
    if isinstance(dtype, StructType):
        fields = []
        for f in dtype.fields:
            if not _NAME.fullmatch(f.name):
                raise OptionError(f"field {f.name!r} is not a valid Avro name")
            inner = _avro(f.dataType, f"{name}_{f.name}")
            fields.append(
                {"name": f.name, "type": _nullable(inner), "default": None}
                if f.nullable
                else {"name": f.name, "type": inner}
            )
        return {"type": "record", "name": name, "fields": fields}
    if isinstance(dtype, ArrayType):
        items = _avro(dtype.elementType, f"{name}_item")
        return {"type": "array", "items": _nullable(items) if dtype.containsNull else items}
    if isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType):
            raise OptionError("Avro maps need string keys")
        values = _avro(dtype.valueType, f"{name}_value")
        return {"type": "map", "values": _nullable(values) if dtype.valueContainsNull else values}
    if isinstance(dtype, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    simple = {
        StringType: "string",
        LongType: "long",
        IntegerType: "int",
        ShortType: "int",
        ByteType: "int",
        BooleanType: "boolean",
        FloatType: "float",
        DoubleType: "double",
        BinaryType: "bytes",
    }
    for kind, avro_name in simple.items():
        if isinstance(dtype, kind):
            return avro_name
    if isinstance(dtype, DateType):
        return {"type": "int", "logicalType": "date"}
    if isinstance(dtype, TimestampType):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if isinstance(dtype, TimestampNTZType):
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    raise OptionError(f"no Avro type for Spark type {dtype.simpleString()}")


# -- Arrow's Python values as each format's encoder takes them --------------------------------


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_map(kind.value_type)
    return False


def _maps_as_dicts(value: Any) -> Any:
    """Arrow gives a map as a list of (key, value) pairs."""
    if isinstance(value, dict):
        return {k: _maps_as_dicts(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {k: _maps_as_dicts(v) for k, v in value}
        return [_maps_as_dicts(x) for x in value]
    return value


def _proto_json(value: Any) -> Any:
    """Protobuf's JSON mapping: bytes in base64, big integers as they are."""
    if isinstance(value, dict):
        return {k: _proto_json(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_proto_json(x) for x in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return int(value)
    return value


class ColumnEncoder:
    def __init__(self, fmt: ColumnFormat, options: SchemaOptions, dtype: DataType):
        self.fmt = fmt
        self.url = options.url
        self.auto_register = options.auto_register
        self.dtype = dtype
        self.targets: dict[str, tuple[bytes, Callable[[Any], bytes]]] = {}

    def _target(self, topic: str) -> tuple[bytes, Callable[[Any], bytes]]:
        subject = self.fmt.subject_of(topic)
        found = self.targets.get(subject)
        if found is not None:
            return found
        client = client_for(self.url)
        if self.auto_register:
            text = json.dumps(avro_schema_of(self.dtype, self.fmt.column))
            schema_id = client.register(subject, "AVRO", text)
            schema = client.schema(schema_id)
        else:
            chosen = subject_schema(self.url, self.fmt, topic)
            schema_id, schema = chosen.schema_id, chosen.schema
        parsed = schema.parsed if self.fmt.schema_type != "JSON" else None
        if self.fmt.schema_type == "AVRO":
            head = framing.frame(schema_id, b"")
            encode: Callable[[Any], bytes] = parsed.encode  # type: ignore[union-attr]
        elif self.fmt.schema_type == "JSON":
            head = framing.frame(schema_id, b"")

            def encode(value: Any) -> bytes:
                return json.dumps(value, default=json_default, separators=(",", ":")).encode()
        else:
            name = parsed.first_message_name()  # type: ignore[union-attr]
            head = framing.frame(schema_id, framing.message_indexes([0]))

            def encode(value: Any) -> bytes:
                return parsed.encode(_proto_json(value), name)  # type: ignore[union-attr]

        found = self.targets[subject] = (head, encode)
        return found

    def encode(self, column: pa.Array, topics: list[str | None]) -> list[bytes | None]:
        values = column.to_pylist()
        if _has_map(column.type):
            values = [_maps_as_dicts(v) for v in values]
        out: list[bytes | None] = []
        for value, topic in zip(values, topics, strict=True):
            if value is None:
                out.append(None)
                continue
            if topic is None:
                raise OptionError("a row has a null topic and no 'topic' option is set")
            head, encode = self._target(topic)
            try:
                out.append(head + encode(value))
            except (ValueMismatch, SchemaError, ValueError, TypeError) as exc:
                raise EncodeError(
                    f"a {self.fmt.column} for topic {topic!r} does not fit the "
                    f"{self.fmt.schema_type} schema of subject "
                    f"{self.fmt.subject_of(topic)!r}: {exc}"
                ) from None
        return out
