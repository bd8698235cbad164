"""The Spark source's pure parts for schema'd records: Confluent's framing, the Spark types
derived from Avro and JSON schemas, and the Avro schema derived from a Spark type."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from chronik.schemas.formats import parse  # noqa: E402
from chronik.spark.schema_types import avro_type, json_schema_type  # noqa: E402
from chronik.spark.value_decode import NotFramed, split  # noqa: E402
from chronik.spark.value_encode import avro_schema_of  # noqa: E402


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00\x00", "fewer than the 5"),
        (b"\x01\x00\x00\x00\x01x", "magic byte 1"),
        (b"\x00\xff\xff\xff\xffx", "negative schema id"),
    ],
)
def test_unframed_values_say_why(data: bytes, why: str):
    with pytest.raises(NotFramed, match=why):
        split(data)
    assert split(b"\x00\x00\x00\x01\x2cpayload") == (300, 5)


def test_avro_types():
    schema = parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "Node",
                "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "label", "type": ["null", "string"], "default": None},
                    {
                        "name": "kind",
                        "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]},
                    },
                    {"name": "tags", "type": {"type": "map", "values": "int"}},
                    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
                    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                    {
                        "name": "price",
                        "type": {
                            "type": "bytes",
                            "logicalType": "decimal",
                            "precision": 9,
                            "scale": 2,
                        },
                    },
                    {"name": "n", "type": ["int", "long"]},
                    {"name": "either", "type": ["string", "int"]},
                    {"name": "next", "type": ["null", "Node"], "default": None},
                ],
            }
        ),
    )
    mapped = avro_type(schema.fastavro_schema)  # type: ignore[attr-defined]
    assert mapped.dtype == StructType(
        [
            StructField("id", LongType()),
            StructField("label", StringType()),
            StructField("kind", StringType()),
            StructField("tags", MapType(StringType(), IntegerType())),
            StructField("day", DateType()),
            StructField("at", TimestampType()),
            StructField("price", DecimalType(9, 2)),
            StructField("n", LongType()),
            StructField("either", StringType()),
            StructField("next", StringType()),
        ]
    )
    assert mapped.convert is not None
    value = mapped.convert({"id": 1, "either": 5, "next": {"id": 2, "next": None}})
    assert value["either"] == "5"
    assert json.loads(value["next"]) == {"id": 2, "next": None}


def test_json_schema_types():
    doc = {
        "type": "object",
        "definitions": {"money": {"type": "number"}},
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"]},
            "price": {"$ref": "#/definitions/money"},
            "lines": {
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
            },
            "meta": {"type": "object"},
            "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    mapped = json_schema_type(doc)
    assert mapped.dtype.simpleString() == (
        "struct<id:bigint,name:string,price:double,lines:array<struct<sku:string>>,"
        "meta:string,any:string>"
    )
    assert mapped.convert is not None
    value = mapped.convert({"id": 3.0, "meta": {"a": 1}, "any": 7, "lines": []})
    assert (value["id"], value["meta"], value["any"]) == (3, '{"a": 1}', "7")


def test_avro_schema_of_a_spark_type_maps_back_to_it():
    dtype = StructType(
        [
            StructField("name", StringType()),
            StructField("age", IntegerType(), nullable=False),
            StructField("tags", ArrayType(StringType())),
            StructField("address", StructType([StructField("city", StringType())])),
            StructField("at", TimestampType()),
        ]
    )
    text = json.dumps(avro_schema_of(dtype, "value"))
    schema = parse("AVRO", text)
    mapped = avro_type(schema.fastavro_schema).dtype  # type: ignore[attr-defined]
    assert mapped.simpleString() == dtype.simpleString()
    encoded = schema.encode(
        {
            "name": "a",
            "age": 3,
            "tags": ["x"],  # type: ignore[attr-defined]
            "address": {"city": "Oslo"},
            "at": None,
        }
    )
    assert schema.decode(encoded)["address"] == {"city": "Oslo"}  # type: ignore[attr-defined]


def test_added_fields_with_defaults_resolve_without_avros_resolution():
    from chronik.spark.value_decode import added_defaults

    def record(*fields: dict) -> object:
        doc = {"type": "record", "name": "User", "fields": list(fields)}
        return parse("AVRO", json.dumps(doc)).fastavro_schema  # type: ignore[attr-defined]

    name = {"name": "name", "type": "string"}
    v1 = record(name, {"name": "age", "type": "int"})
    v2 = record(
        name,
        {"name": "country", "type": "string", "default": "unknown"},
        {"name": "nick", "type": ["null", "string"], "default": None},
    )
    assert added_defaults(v1, v2) == {"country": "unknown", "nick": None}
    # A changed field, or a default of a type that needs conversion, takes Avro's way.
    assert added_defaults(v1, record({"name": "name", "type": "bytes"})) is None
    assert added_defaults(v1, record(name, {"name": "b", "type": "bytes", "default": "a"})) is None


def test_compiled_avro_columns_equal_the_per_record_decoder():
    import io

    import fastavro
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    from chronik.spark import avro_columns

    fields = [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": ["double", "null"]},
        {"name": "s", "type": ["null", "string"]},
        {"name": "b", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "in",
            "type": {"type": "record", "name": "In", "fields": [{"name": "v", "type": "string"}]},
        },
    ]
    writer = parse("AVRO", json.dumps({"type": "record", "name": "R", "fields": fields}))
    reader = parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "R",
                "fields": [*fields, {"name": "extra", "type": "string", "default": "z"}],
            }
        ),
    )
    values = [
        {
            "id": -(2**40) + i,
            "n": i - 3,
            "ok": i % 2 == 0,
            "f": 1.5 * i,
            "d": None if i % 3 else i / 3,
            "s": None if i % 2 else f"é{i}",
            "b": bytes([i]),
            "e": "XY"[i % 2],
            "day": 19000 + i,
            "at": 1_700_000_000_000_000 + i,
            "in": {"v": str(i)},
        }
        for i in range(7)
    ]
    payloads = []
    for v in values:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, writer.fastavro_schema, v)  # type: ignore[attr-defined]
        payloads.append(out.getvalue())
    buf = np.frombuffer(b"".join(payloads), np.uint8)
    ends = np.cumsum([len(p) for p in payloads]).astype(np.int64)
    starts = ends - np.array([len(p) for p in payloads])
    program = avro_columns.compile_program(writer.fastavro_schema)  # type: ignore[attr-defined]
    assert program is not None
    plan = avro_columns.reader_plan(program, reader.fastavro_schema)  # type: ignore[attr-defined]
    target = to_arrow_type(avro_type(reader.fastavro_schema).dtype, timezone="UTC")  # type: ignore[attr-defined]
    got = avro_columns.decode_column(program, plan, buf, starts, ends, target)
    want = pa.array([writer.decode(p, reader=reader) for p in payloads], target)  # type: ignore[attr-defined]
    assert got is not None and got.equals(want)
    # A record cut short does not read whole: the per-record decoder takes over.
    assert avro_columns.decode_column(program, plan, buf, starts, ends - 1, target) is None
    # Arrays (and maps, other unions) are not compiled.
    other = parse(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "A",
                "fields": [{"name": "xs", "type": {"type": "array", "items": "int"}}],
            }
        ),
    )
    assert avro_columns.compile_program(other.fastavro_schema) is None  # type: ignore[attr-defined]
