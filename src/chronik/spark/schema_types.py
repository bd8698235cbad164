"""Spark types of schema'd keys and values, and how a decoded value takes that shape.

Each mapping gives a Spark type and a converter from the decoder's Python value (fastavro's,
``json.loads``', a protobuf message) to what Arrow builds that type from; the converter is
None where the decoder's value fits as it is, so nothing is walked for nothing.

Avro: record -> struct, array -> array, map -> map<string, _>, a union of null and one type ->
that type (nullable), a union of int/long -> long, of float/double -> double, any other union
-> string holding JSON, enum -> string, fixed/bytes -> binary, date -> date,
timestamp-millis/micros -> timestamp, local-timestamp-* -> timestamp_ntz, decimal -> decimal
(precision up to 38, else string), uuid -> string, time-* -> string (ISO), a recursive type
-> string holding JSON.
JSON Schema: object with properties -> struct, array with items -> array, string, integer
-> long, number -> double, boolean; a type list with "null" -> that type; local ``$ref``s
followed; anything else (oneOf, an object without properties, recursion) -> string holding
JSON.
Protobuf: message -> struct, repeated -> array, map -> map, enum -> string (its name), int32
family -> int, int64 family and uint32 -> long, uint64/fixed64 -> decimal(20,0), a field
without presence -> its default when unset, a message field -> null when unset, recursion ->
string holding JSON.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

Convert = Callable[[Any], Any] | None


@dataclass(frozen=True)
class Mapped:
    dtype: DataType
    convert: Convert = None


class UnmappableSchema(ValueError):
    pass


def json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def as_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=json_default, sort_keys=True)


def _maybe(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else fn(v)


JSON_STRING = Mapped(StringType(), as_json)


def _struct(fields: list[tuple[str, Mapped]]) -> Mapped:
    dtype = StructType([StructField(name, m.dtype, True) for name, m in fields])
    converts = [(name, m.convert) for name, m in fields if m.convert is not None]
    if not converts:
        return Mapped(dtype)

    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, fn in converts:
            if name in out:
                out[name] = fn(out[name])
        return out

    return Mapped(dtype, convert)


def _array(item: Mapped) -> Mapped:
    fn = item.convert
    return Mapped(
        ArrayType(item.dtype, True), None if fn is None else _maybe(lambda v: [fn(x) for x in v])
    )


def _map(key: Mapped, value: Mapped) -> Mapped:
    fn = value.convert
    return Mapped(
        MapType(key.dtype, value.dtype, True),
        None if fn is None else _maybe(lambda v: {k: fn(x) for k, x in v.items()}),
    )


# -- Avro -------------------------------------------------------------------------------------

_AVRO_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
    "null": NullType(),
}


def avro_type(fast: Any) -> Mapped:
    """The mapping of a fastavro-parsed schema (``AvroSchema.fastavro_schema``)."""
    named = fast.get("__named_schemas", {}) if isinstance(fast, dict) else {}
    return _Avro(named).map(fast, ())


class _Avro:
    def __init__(self, named: Mapping[str, Any]):
        self.named = named

    def map(self, node: Any, expanding: tuple[str, ...]) -> Mapped:
        if isinstance(node, str):
            if node in _AVRO_PRIMITIVES:
                return Mapped(_AVRO_PRIMITIVES[node])
            if node in expanding:
                return JSON_STRING
            if node not in self.named:
                raise UnmappableSchema(f"Avro type {node!r} is not defined")
            return self.map(self.named[node], expanding)
        if isinstance(node, list):
            return self._union(node, expanding)
        kind = node.get("type")
        logical = node.get("logicalType")
        if logical is not None:
            found = self._logical(node, logical)
            if found is not None:
                return found
        if kind == "record" or kind == "error":
            name = node.get("name", "")
            inner = (*expanding, name)
            return _struct([(f["name"], self.map(f["type"], inner)) for f in node["fields"]])
        if kind == "enum":
            return Mapped(StringType())
        if kind == "fixed":
            return Mapped(BinaryType())
        if kind == "array":
            return _array(self.map(node["items"], expanding))
        if kind == "map":
            return _map(Mapped(StringType()), self.map(node["values"], expanding))
        return self.map(kind, expanding)

    def _logical(self, node: Mapping[str, Any], logical: str) -> Mapped | None:
        kind = node.get("type")
        if logical == "date" and kind == "int":
            return Mapped(DateType())
        if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            return Mapped(TimestampType())
        if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
            return Mapped(TimestampNTZType())
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
            if 0 < precision <= 38 and 0 <= scale <= precision:
                return Mapped(DecimalType(precision, scale))
            return Mapped(StringType(), _maybe(str))
        if logical == "uuid" and kind == "string":
            return Mapped(StringType(), _maybe(lambda v: str(v) if isinstance(v, uuid.UUID) else v))
        if logical in ("time-millis", "time-micros"):
            return Mapped(
                StringType(), _maybe(lambda v: v.isoformat() if hasattr(v, "isoformat") else str(v))
            )
        return None

    def _union(self, branches: list[Any], expanding: tuple[str, ...]) -> Mapped:
        others = [b for b in branches if b != "null"]
        if not others:
            return Mapped(NullType())
        if len(others) == 1:
            return self.map(others[0], expanding)
        if set(others) <= {"int", "long"}:
            return Mapped(LongType())
        if set(others) <= {"float", "double"}:
            return Mapped(DoubleType())
        return JSON_STRING


# -- JSON Schema ------------------------------------------------------------------------------


def json_schema_type(doc: Any) -> Mapped:
    """The mapping of a JSON Schema document."""
    return _Json(doc).map(doc, ())


class _Json:
    def __init__(self, root: Any):
        self.root = root

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            return None
        node = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def map(self, node: Any, refs: tuple[str, ...]) -> Mapped:
        if not isinstance(node, dict):
            return JSON_STRING
        if "$ref" in node:
            ref = node["$ref"]
            target = self._resolve(ref) if isinstance(ref, str) else None
            if target is None or ref in refs:
                return JSON_STRING
            return self.map(target, (*refs, ref))
        kind = node.get("type")
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            kind = others[0] if len(others) == 1 else None
        if kind is None and "properties" in node:
            kind = "object"
        if kind == "object":
            props = node.get("properties")
            if not isinstance(props, dict) or not props:
                return JSON_STRING
            return _struct([(name, self.map(sub, refs)) for name, sub in props.items()])
        if kind == "array":
            items = node.get("items")
            return _array(self.map(items, refs)) if isinstance(items, dict) else JSON_STRING
        if kind == "string":
            return Mapped(StringType(), _maybe(lambda v: v if isinstance(v, str) else as_json(v)))
        if kind == "integer":
            return Mapped(LongType(), _maybe(_json_integer))
        if kind == "number":
            return Mapped(DoubleType())
        if kind == "boolean":
            return Mapped(BooleanType())
        return JSON_STRING


def _json_integer(value: Any) -> Any:
    # 3.0 is an integer to JSON Schema; Arrow takes only ints for a long.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# -- Protobuf ---------------------------------------------------------------------------------


def protobuf_type(descriptor: Any) -> Mapped:
    """The mapping of a message descriptor; the converter takes a message object."""
    return _Proto().message(descriptor, ())


class _Proto:
    def message(self, desc: Any, expanding: tuple[str, ...]) -> Mapped:
        if desc.full_name in expanding:
            from google.protobuf import json_format

            return Mapped(
                StringType(),
                _maybe(
                    lambda m: json_format.MessageToJson(
                        m, preserving_proto_field_name=True, indent=None
                    )
                ),
            )
        inner = (*expanding, desc.full_name)
        fields: list[tuple[str, Mapped]] = []
        getters: list[tuple[str, Callable[[Any], Any]]] = []
        for fd in desc.fields:
            mapped, getter = self.field(fd, inner)
            fields.append((fd.name, mapped))
            getters.append((fd.name, getter))
        dtype = StructType([StructField(n, m.dtype, True) for n, m in fields])

        def convert(msg: Any) -> Any:
            if msg is None:
                return None
            return {name: get(msg) for name, get in getters}

        return Mapped(dtype, convert)

    def field(self, fd: Any, expanding: tuple[str, ...]) -> tuple[Mapped, Callable[[Any], Any]]:
        name = fd.name
        if _is_map(fd):
            key_fd, value_fd = (
                fd.message_type.fields_by_name["key"],
                fd.message_type.fields_by_name["value"],
            )
            key = self.single(key_fd, expanding)
            value = self.single(value_fd, expanding)
            kfn, vfn = key.convert or _same, value.convert or _same
            mapped = Mapped(MapType(key.dtype, value.dtype, True))
            return mapped, lambda m: {kfn(k): vfn(v) for k, v in getattr(m, name).items()}
        item = self.single(fd, expanding)
        fn = item.convert
        if _is_repeated(fd):
            mapped = Mapped(ArrayType(item.dtype, True))
            if fn is None:
                return mapped, lambda m: list(getattr(m, name))
            return mapped, lambda m: [fn(x) for x in getattr(m, name)]
        if fd.has_presence:
            if fn is None:
                return item, lambda m: getattr(m, name) if m.HasField(name) else None
            return item, lambda m: fn(getattr(m, name)) if m.HasField(name) else None
        if fn is None:
            return item, lambda m: getattr(m, name)
        return item, lambda m: fn(getattr(m, name))

    def single(self, fd: Any, expanding: tuple[str, ...]) -> Mapped:
        from google.protobuf.descriptor import FieldDescriptor as F

        t = fd.type
        if t == F.TYPE_MESSAGE or t == F.TYPE_GROUP:
            return self.message(fd.message_type, expanding)
        if t == F.TYPE_ENUM:
            enum = fd.enum_type

            def name_of(number: int) -> str:
                value = enum.values_by_number.get(number)
                return value.name if value is not None else str(number)

            return Mapped(StringType(), name_of)
        if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
            return Mapped(IntegerType())
        if t in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT32, F.TYPE_FIXED32):
            return Mapped(LongType())
        if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
            return Mapped(DecimalType(20, 0), decimal.Decimal)
        if t == F.TYPE_DOUBLE:
            return Mapped(DoubleType())
        if t == F.TYPE_FLOAT:
            return Mapped(FloatType())
        if t == F.TYPE_BOOL:
            return Mapped(BooleanType())
        if t == F.TYPE_BYTES:
            return Mapped(BinaryType())
        return Mapped(StringType())


def _same(v: Any) -> Any:
    return v


def _is_map(fd: Any) -> bool:
    msg = fd.message_type
    return msg is not None and _is_repeated(fd) and msg.GetOptions().map_entry


def _is_repeated(fd: Any) -> bool:
    from google.protobuf.descriptor import FieldDescriptor as F

    is_repeated = getattr(fd, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return fd.label == F.LABEL_REPEATED
