"""The Avro format of the schema layer: parsing with references, canonical and normal
forms, Confluent's compatibility messages over the avro package's checker (its own test
table ported here), the seven compatibility levels, value checks and the binary codec."""

from __future__ import annotations

import contextlib
import io
import json
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.schemas.avro import FORMAT, MAX_DEPTH, AvroFormat, AvroSchema
from chronik.schemas.compatibility import LEVELS, incompatibilities
from chronik.schemas.types import SchemaError, ValueMismatch


def parse(doc: Any, references: dict[str, Any] | None = None) -> AvroSchema:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    refs = {
        name: ref if isinstance(ref, str) else json.dumps(ref)
        for name, ref in (references or {}).items()
    }
    return AvroFormat().parse(text, refs)


def table(doc: Any) -> AvroSchema:
    return AvroFormat().parse(json.dumps(doc), {})


def error_types(messages: list[str]) -> set[str]:
    return {m.split("'")[1] for m in messages if m.startswith("{errorType:'")}


# --- the avro package's compatibility table (avro/test/test_compatibility.py) ----------------
#
# Its schemas, as their JSON, and its pairs by name. ``[]`` (the empty union) is refused by
# this layer, so the pairs that use it are checked to be refused at parse instead.

AVRO_TABLE_SCHEMAS: dict[str, Any] = {
    "BOOLEAN_SCHEMA": "boolean",
    "NULL_SCHEMA": "null",
    "INT_SCHEMA": "int",
    "LONG_SCHEMA": "long",
    "STRING_SCHEMA": "string",
    "BYTES_SCHEMA": "bytes",
    "FLOAT_SCHEMA": "float",
    "DOUBLE_SCHEMA": "double",
    "INT_ARRAY_SCHEMA": {"type": "array", "items": "int"},
    "LONG_ARRAY_SCHEMA": {"type": "array", "items": "long"},
    "STRING_ARRAY_SCHEMA": {"type": "array", "items": "string"},
    "INT_MAP_SCHEMA": {"type": "map", "values": "int"},
    "LONG_MAP_SCHEMA": {"type": "map", "values": "long"},
    "STRING_MAP_SCHEMA": {"type": "map", "values": "string"},
    "ENUM1_AB_SCHEMA": {"type": "enum", "name": "Enum1", "symbols": ["A", "B"]},
    "ENUM1_ABC_SCHEMA": {"type": "enum", "name": "Enum1", "symbols": ["A", "B", "C"]},
    "ENUM1_BC_SCHEMA": {"type": "enum", "name": "Enum1", "symbols": ["B", "C"]},
    "ENUM2_AB_SCHEMA": {"type": "enum", "name": "Enum2", "symbols": ["A", "B"]},
    "ENUM_ABC_ENUM_DEFAULT_A_SCHEMA": {
        "type": "enum",
        "default": "A",
        "name": "Enum",
        "symbols": ["A", "B", "C"],
    },
    "ENUM_AB_ENUM_DEFAULT_A_SCHEMA": {
        "type": "enum",
        "default": "A",
        "name": "Enum",
        "symbols": ["A", "B"],
    },
    "ENUM_ABC_ENUM_DEFAULT_A_RECORD": {
        "type": "record",
        "name": "Record",
        "fields": [
            {
                "type": {
                    "type": "enum",
                    "default": "A",
                    "name": "Enum",
                    "symbols": ["A", "B", "C"],
                },
                "name": "Field",
            }
        ],
    },
    "ENUM_AB_ENUM_DEFAULT_A_RECORD": {
        "type": "record",
        "name": "Record",
        "fields": [
            {
                "type": {
                    "type": "enum",
                    "default": "A",
                    "name": "Enum",
                    "symbols": ["A", "B"],
                },
                "name": "Field",
            }
        ],
    },
    "ENUM_ABC_FIELD_DEFAULT_B_ENUM_DEFAULT_A_RECORD": {
        "type": "record",
        "name": "Record",
        "fields": [
            {
                "type": {
                    "type": "enum",
                    "default": "A",
                    "name": "Enum",
                    "symbols": ["A", "B", "C"],
                },
                "name": "Field",
                "default": "B",
            }
        ],
    },
    "ENUM_AB_FIELD_DEFAULT_A_ENUM_DEFAULT_B_RECORD": {
        "type": "record",
        "name": "Record",
        "fields": [
            {
                "type": {
                    "type": "enum",
                    "default": "B",
                    "name": "Enum",
                    "symbols": ["A", "B"],
                },
                "name": "Field",
                "default": "A",
            }
        ],
    },
    "EMPTY_UNION_SCHEMA": [],
    "NULL_UNION_SCHEMA": ["null"],
    "INT_UNION_SCHEMA": ["int"],
    "LONG_UNION_SCHEMA": ["long"],
    "FLOAT_UNION_SCHEMA": ["float"],
    "DOUBLE_UNION_SCHEMA": ["double"],
    "STRING_UNION_SCHEMA": ["string"],
    "BYTES_UNION_SCHEMA": ["bytes"],
    "INT_STRING_UNION_SCHEMA": ["int", "string"],
    "STRING_INT_UNION_SCHEMA": ["string", "int"],
    "INT_FLOAT_UNION_SCHEMA": ["int", "float"],
    "INT_LONG_UNION_SCHEMA": ["int", "long"],
    "INT_LONG_FLOAT_DOUBLE_UNION_SCHEMA": ["int", "long", "float", "double"],
    "NULL_INT_ARRAY_UNION_SCHEMA": ["null", {"type": "array", "items": "int"}],
    "NULL_INT_MAP_UNION_SCHEMA": ["null", {"type": "map", "values": "int"}],
    "EMPTY_RECORD1": {"type": "record", "name": "Record1", "fields": []},
    "EMPTY_RECORD2": {"type": "record", "name": "Record2", "fields": []},
    "A_INT_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [{"type": "int", "name": "a"}],
    },
    "A_LONG_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [{"type": "long", "name": "a"}],
    },
    "A_INT_B_INT_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [{"type": "int", "name": "a"}, {"type": "int", "name": "b"}],
    },
    "A_DINT_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [{"type": "int", "name": "a", "default": 0}],
    },
    "A_INT_B_DINT_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a"},
            {"type": "int", "name": "b", "default": 0},
        ],
    },
    "A_DINT_B_DINT_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {"type": "int", "name": "b", "default": 0},
        ],
    },
    "A_DINT_B_DFIXED_4_BYTES_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {"type": {"type": "fixed", "name": "Fixed", "size": 4}, "name": "b"},
        ],
    },
    "A_DINT_B_DFIXED_8_BYTES_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {"type": {"type": "fixed", "name": "Fixed", "size": 8}, "name": "b"},
        ],
    },
    "A_DINT_B_DINT_STRING_UNION_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {"type": ["int", "string"], "name": "b", "default": 0},
        ],
    },
    "A_DINT_B_DINT_UNION_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {"type": ["int"], "name": "b", "default": 0},
        ],
    },
    "A_DINT_B_DENUM_1_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {
                "type": {"type": "enum", "name": "Enum1", "symbols": ["A", "B"]},
                "name": "b",
            },
        ],
    },
    "A_DINT_B_DENUM_2_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {"type": "int", "name": "a", "default": 0},
            {
                "type": {"type": "enum", "name": "Enum2", "symbols": ["A", "B"]},
                "name": "b",
            },
        ],
    },
    "FIXED_4_BYTES": {"type": "fixed", "name": "Fixed", "size": 4},
    "FIXED_8_BYTES": {"type": "fixed", "name": "Fixed", "size": 8},
    "NS_RECORD1": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "InnerRecord1",
                            "namespace": "ns1",
                            "fields": [{"type": "int", "name": "a"}],
                        },
                    },
                ],
                "name": "f1",
            }
        ],
    },
    "NS_RECORD2": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "InnerRecord1",
                            "namespace": "ns2",
                            "fields": [{"type": "int", "name": "a"}],
                        },
                    },
                ],
                "name": "f1",
            }
        ],
    },
    "WITHOUT_NAMESPACE_RECORD": {
        "type": "record",
        "name": "Record",
        "fields": [{"type": "int", "name": "f1"}],
    },
    "WITH_NAMESPACE_RECORD": {
        "type": "record",
        "name": "Record",
        "namespace": "ns",
        "fields": [{"type": "int", "name": "f1"}],
    },
    "UNION_INT_RECORD1": [
        "int",
        {
            "type": "record",
            "name": "Record1",
            "fields": [{"type": "int", "name": "field1"}],
        },
    ],
    "UNION_INT_RECORD2": [
        "int",
        {
            "type": "record",
            "name": "Record2",
            "fields": [{"type": "int", "name": "field1"}],
        },
    ],
    "UNION_INT_ENUM1_AB": [
        "int",
        {"type": "enum", "name": "Enum1", "symbols": ["A", "B"]},
    ],
    "UNION_INT_FIXED_4_BYTES": ["int", {"type": "fixed", "name": "Fixed", "size": 4}],
    "UNION_INT_BOOLEAN": ["int", "boolean"],
    "UNION_INT_ARRAY_INT": ["int", {"type": "array", "items": "int"}],
    "UNION_INT_MAP_INT": ["int", {"type": "map", "values": "int"}],
    "UNION_INT_NULL": ["int", "null"],
    "FIXED_4_ANOTHER_NAME": {"type": "fixed", "name": "AnotherName", "size": 4},
    "RECORD1_WITH_ENUM_AB": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {
                "type": {"type": "enum", "name": "Enum1", "symbols": ["A", "B"]},
                "name": "field1",
            }
        ],
    },
    "RECORD1_WITH_ENUM_ABC": {
        "type": "record",
        "name": "Record1",
        "fields": [
            {
                "type": {"type": "enum", "name": "Enum1", "symbols": ["A", "B", "C"]},
                "name": "field1",
            }
        ],
    },
}


COMPATIBLE = [
    ("BOOLEAN_SCHEMA", "BOOLEAN_SCHEMA"),
    ("INT_SCHEMA", "INT_SCHEMA"),
    ("LONG_SCHEMA", "INT_SCHEMA"),
    ("LONG_SCHEMA", "LONG_SCHEMA"),
    ("FLOAT_SCHEMA", "INT_SCHEMA"),
    ("FLOAT_SCHEMA", "LONG_SCHEMA"),
    ("DOUBLE_SCHEMA", "LONG_SCHEMA"),
    ("DOUBLE_SCHEMA", "INT_SCHEMA"),
    ("DOUBLE_SCHEMA", "FLOAT_SCHEMA"),
    ("STRING_SCHEMA", "STRING_SCHEMA"),
    ("BYTES_SCHEMA", "BYTES_SCHEMA"),
    ("STRING_SCHEMA", "BYTES_SCHEMA"),
    ("BYTES_SCHEMA", "STRING_SCHEMA"),
    ("INT_ARRAY_SCHEMA", "INT_ARRAY_SCHEMA"),
    ("LONG_ARRAY_SCHEMA", "INT_ARRAY_SCHEMA"),
    ("INT_MAP_SCHEMA", "INT_MAP_SCHEMA"),
    ("LONG_MAP_SCHEMA", "INT_MAP_SCHEMA"),
    ("ENUM1_AB_SCHEMA", "ENUM1_AB_SCHEMA"),
    ("ENUM1_ABC_SCHEMA", "ENUM1_AB_SCHEMA"),
    ("EMPTY_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "INT_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "LONG_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "INT_LONG_UNION_SCHEMA"),
    ("INT_UNION_SCHEMA", "INT_UNION_SCHEMA"),
    ("INT_STRING_UNION_SCHEMA", "STRING_INT_UNION_SCHEMA"),
    ("INT_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("LONG_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("LONG_UNION_SCHEMA", "INT_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "INT_UNION_SCHEMA"),
    ("DOUBLE_UNION_SCHEMA", "INT_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "LONG_UNION_SCHEMA"),
    ("DOUBLE_UNION_SCHEMA", "LONG_UNION_SCHEMA"),
    ("FLOAT_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("DOUBLE_UNION_SCHEMA", "FLOAT_UNION_SCHEMA"),
    ("STRING_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("STRING_UNION_SCHEMA", "BYTES_UNION_SCHEMA"),
    ("BYTES_UNION_SCHEMA", "EMPTY_UNION_SCHEMA"),
    ("BYTES_UNION_SCHEMA", "STRING_UNION_SCHEMA"),
    ("DOUBLE_UNION_SCHEMA", "INT_FLOAT_UNION_SCHEMA"),
    ("FLOAT_SCHEMA", "INT_FLOAT_UNION_SCHEMA"),
    ("LONG_SCHEMA", "INT_LONG_UNION_SCHEMA"),
    ("DOUBLE_SCHEMA", "INT_FLOAT_UNION_SCHEMA"),
    ("DOUBLE_SCHEMA", "INT_LONG_FLOAT_DOUBLE_UNION_SCHEMA"),
    ("FLOAT_SCHEMA", "FLOAT_UNION_SCHEMA"),
    ("INT_UNION_SCHEMA", "INT_SCHEMA"),
    ("INT_SCHEMA", "INT_UNION_SCHEMA"),
    ("FIXED_4_BYTES", "FIXED_4_BYTES"),
    ("EMPTY_RECORD1", "EMPTY_RECORD1"),
    ("EMPTY_RECORD1", "A_INT_RECORD1"),
    ("A_INT_RECORD1", "A_INT_RECORD1"),
    ("A_DINT_RECORD1", "A_INT_RECORD1"),
    ("A_DINT_RECORD1", "A_DINT_RECORD1"),
    ("A_INT_RECORD1", "A_DINT_RECORD1"),
    ("A_LONG_RECORD1", "A_INT_RECORD1"),
    ("A_INT_RECORD1", "A_INT_B_INT_RECORD1"),
    ("A_DINT_RECORD1", "A_INT_B_INT_RECORD1"),
    ("A_INT_B_DINT_RECORD1", "A_INT_RECORD1"),
    ("A_DINT_B_DINT_RECORD1", "EMPTY_RECORD1"),
    ("A_DINT_B_DINT_RECORD1", "A_INT_RECORD1"),
    ("A_INT_B_INT_RECORD1", "A_DINT_B_DINT_RECORD1"),
    ("NULL_SCHEMA", "NULL_SCHEMA"),
    ("ENUM_AB_ENUM_DEFAULT_A_RECORD", "ENUM_ABC_ENUM_DEFAULT_A_RECORD"),
    (
        "ENUM_AB_FIELD_DEFAULT_A_ENUM_DEFAULT_B_RECORD",
        "ENUM_ABC_FIELD_DEFAULT_B_ENUM_DEFAULT_A_RECORD",
    ),
    ("NS_RECORD1", "NS_RECORD2"),
    ("WITHOUT_NAMESPACE_RECORD", "WITH_NAMESPACE_RECORD"),
]

# (reader, writer, errorType, path, additionalInfo in the Java checker's wording)
INCOMPATIBLE = [
    # fixed size mismatch
    ("FIXED_4_BYTES", "FIXED_8_BYTES", "FIXED_SIZE_MISMATCH", "/size", "expected: 8, found: 4"),
    ("FIXED_8_BYTES", "FIXED_4_BYTES", "FIXED_SIZE_MISMATCH", "/size", "expected: 4, found: 8"),
    (
        "A_DINT_B_DFIXED_8_BYTES_RECORD1",
        "A_DINT_B_DFIXED_4_BYTES_RECORD1",
        "FIXED_SIZE_MISMATCH",
        "/fields/1/type/size",
        "expected: 4, found: 8",
    ),
    (
        "A_DINT_B_DFIXED_4_BYTES_RECORD1",
        "A_DINT_B_DFIXED_8_BYTES_RECORD1",
        "FIXED_SIZE_MISMATCH",
        "/fields/1/type/size",
        "expected: 8, found: 4",
    ),
    # missing enum symbols
    ("ENUM1_AB_SCHEMA", "ENUM1_ABC_SCHEMA", "MISSING_ENUM_SYMBOLS", "/symbols", "[C]"),
    ("ENUM1_BC_SCHEMA", "ENUM1_ABC_SCHEMA", "MISSING_ENUM_SYMBOLS", "/symbols", "[A]"),
    (
        "RECORD1_WITH_ENUM_AB",
        "RECORD1_WITH_ENUM_ABC",
        "MISSING_ENUM_SYMBOLS",
        "/fields/0/type/symbols",
        "[C]",
    ),
    # missing union branch
    (
        "INT_UNION_SCHEMA",
        "INT_STRING_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: STRING",
    ),
    (
        "STRING_UNION_SCHEMA",
        "INT_STRING_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/0",
        "reader union lacking writer type: INT",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_RECORD1",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: RECORD",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_RECORD2",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: RECORD",
    ),
    (
        "UNION_INT_RECORD1",
        "UNION_INT_RECORD2",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: RECORD",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_ENUM1_AB",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: ENUM",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_FIXED_4_BYTES",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: FIXED",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_BOOLEAN",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: BOOLEAN",
    ),
    (
        "INT_UNION_SCHEMA",
        "LONG_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/0",
        "reader union lacking writer type: LONG",
    ),
    (
        "INT_UNION_SCHEMA",
        "FLOAT_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/0",
        "reader union lacking writer type: FLOAT",
    ),
    (
        "INT_UNION_SCHEMA",
        "DOUBLE_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/0",
        "reader union lacking writer type: DOUBLE",
    ),
    (
        "INT_UNION_SCHEMA",
        "BYTES_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/0",
        "reader union lacking writer type: BYTES",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_ARRAY_INT",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: ARRAY",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_MAP_INT",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: MAP",
    ),
    (
        "INT_UNION_SCHEMA",
        "UNION_INT_NULL",
        "MISSING_UNION_BRANCH",
        "/1",
        "reader union lacking writer type: NULL",
    ),
    (
        "INT_UNION_SCHEMA",
        "INT_LONG_FLOAT_DOUBLE_UNION_SCHEMA",
        "MISSING_UNION_BRANCH",
        "/3",
        "reader union lacking writer type: DOUBLE",
    ),
    (
        "A_DINT_B_DINT_UNION_RECORD1",
        "A_DINT_B_DINT_STRING_UNION_RECORD1",
        "MISSING_UNION_BRANCH",
        "/fields/1/type/1",
        "reader union lacking writer type: STRING",
    ),
    # name mismatch
    ("ENUM1_AB_SCHEMA", "ENUM2_AB_SCHEMA", "NAME_MISMATCH", "/name", "expected: Enum2"),
    ("EMPTY_RECORD2", "EMPTY_RECORD1", "NAME_MISMATCH", "/name", "expected: Record1"),
    ("FIXED_4_BYTES", "FIXED_4_ANOTHER_NAME", "NAME_MISMATCH", "/name", "expected: AnotherName"),
    (
        "A_DINT_B_DENUM_1_RECORD1",
        "A_DINT_B_DENUM_2_RECORD1",
        "NAME_MISMATCH",
        "/fields/1/type/name",
        "expected: Enum2",
    ),
    # reader field missing default value
    ("A_INT_RECORD1", "EMPTY_RECORD1", "READER_FIELD_MISSING_DEFAULT_VALUE", "/fields/0", "a"),
    (
        "A_INT_B_DINT_RECORD1",
        "EMPTY_RECORD1",
        "READER_FIELD_MISSING_DEFAULT_VALUE",
        "/fields/0",
        "a",
    ),
    # type mismatch
    (
        "NULL_SCHEMA",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: NULL not compatible with writer type: INT",
    ),
    (
        "NULL_SCHEMA",
        "LONG_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: NULL not compatible with writer type: LONG",
    ),
    (
        "BOOLEAN_SCHEMA",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: BOOLEAN not compatible with writer type: INT",
    ),
    (
        "INT_SCHEMA",
        "NULL_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: NULL",
    ),
    (
        "INT_SCHEMA",
        "BOOLEAN_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: BOOLEAN",
    ),
    (
        "INT_SCHEMA",
        "LONG_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: LONG",
    ),
    (
        "INT_SCHEMA",
        "FLOAT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: FLOAT",
    ),
    (
        "INT_SCHEMA",
        "DOUBLE_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: DOUBLE",
    ),
    (
        "LONG_SCHEMA",
        "FLOAT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: LONG not compatible with writer type: FLOAT",
    ),
    (
        "LONG_SCHEMA",
        "DOUBLE_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: LONG not compatible with writer type: DOUBLE",
    ),
    (
        "FLOAT_SCHEMA",
        "DOUBLE_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: FLOAT not compatible with writer type: DOUBLE",
    ),
    (
        "DOUBLE_SCHEMA",
        "STRING_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: DOUBLE not compatible with writer type: STRING",
    ),
    (
        "FIXED_4_BYTES",
        "STRING_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: FIXED not compatible with writer type: STRING",
    ),
    (
        "STRING_SCHEMA",
        "BOOLEAN_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: STRING not compatible with writer type: BOOLEAN",
    ),
    (
        "STRING_SCHEMA",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: STRING not compatible with writer type: INT",
    ),
    (
        "BYTES_SCHEMA",
        "NULL_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: BYTES not compatible with writer type: NULL",
    ),
    (
        "BYTES_SCHEMA",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: BYTES not compatible with writer type: INT",
    ),
    (
        "A_INT_RECORD1",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: RECORD not compatible with writer type: INT",
    ),
    (
        "INT_ARRAY_SCHEMA",
        "LONG_ARRAY_SCHEMA",
        "TYPE_MISMATCH",
        "/items",
        "reader type: INT not compatible with writer type: LONG",
    ),
    (
        "INT_MAP_SCHEMA",
        "INT_ARRAY_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: MAP not compatible with writer type: ARRAY",
    ),
    (
        "INT_ARRAY_SCHEMA",
        "INT_MAP_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: ARRAY not compatible with writer type: MAP",
    ),
    (
        "INT_MAP_SCHEMA",
        "LONG_MAP_SCHEMA",
        "TYPE_MISMATCH",
        "/values",
        "reader type: INT not compatible with writer type: LONG",
    ),
    (
        "INT_SCHEMA",
        "ENUM2_AB_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: ENUM",
    ),
    (
        "ENUM2_AB_SCHEMA",
        "INT_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: ENUM not compatible with writer type: INT",
    ),
    (
        "FLOAT_SCHEMA",
        "INT_LONG_FLOAT_DOUBLE_UNION_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: FLOAT not compatible with writer type: DOUBLE",
    ),
    (
        "LONG_SCHEMA",
        "INT_FLOAT_UNION_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: LONG not compatible with writer type: FLOAT",
    ),
    (
        "INT_SCHEMA",
        "INT_FLOAT_UNION_SCHEMA",
        "TYPE_MISMATCH",
        "/",
        "reader type: INT not compatible with writer type: FLOAT",
    ),
]

_RECORD = "Record"
# test_schema_compatibility and test_simple_schema_promotion: inline pairs, (reader, writer, ok)
OLD_FIELDS_WRITER = {
    "type": "record",
    "name": _RECORD,
    "fields": [{"name": "oldField1", "type": "int"}, {"name": "oldField2", "type": "string"}],
}
INLINE_CASES = [
    (
        {"type": "record", "name": _RECORD, "fields": [{"name": "oldField1", "type": "int"}]},
        OLD_FIELDS_WRITER,
        True,
    ),
    (
        {"type": "record", "name": _RECORD, "fields": [{"name": "oldField2", "type": "string"}]},
        OLD_FIELDS_WRITER,
        True,
    ),
    (OLD_FIELDS_WRITER, OLD_FIELDS_WRITER, True),
    (
        {
            "type": "record",
            "name": _RECORD,
            "fields": [
                {"name": "oldField1", "type": "int"},
                {"name": "newField2", "type": "int", "default": 42},
            ],
        },
        OLD_FIELDS_WRITER,
        True,
    ),
    (
        {
            "type": "record",
            "name": _RECORD,
            "fields": [{"name": "oldField1", "type": "int"}, {"name": "newField2", "type": "int"}],
        },
        OLD_FIELDS_WRITER,
        False,
    ),
    (
        {"type": "array", "items": {"type": "string"}},
        {"type": "array", "items": {"type": "string"}},
        True,
    ),
    (
        {"type": "map", "values": {"type": "string"}},
        {"type": "array", "items": {"type": "string"}},
        False,
    ),
    ({"type": "string"}, {"type": "string"}, True),
    ({"type": "int"}, {"type": "string"}, False),
    (["int", "string"], ["int", "string", "long"], False),
    (
        {
            "name": "foo",
            "type": "record",
            "fields": [{"type": "int", "name": "bar", "aliases": ["f1"]}],
        },
        {
            "name": "foo",
            "type": "record",
            "fields": [{"type": "int", "name": "f1"}, {"type": "string", "name": "f2"}],
        },
        True,
    ),
    (
        {
            "name": "other",
            "type": "record",
            "fields": [{"type": "int", "name": "f1"}],
            "aliases": ["foo"],
        },
        {
            "name": "foo",
            "type": "record",
            "fields": [{"type": "int", "name": "f1"}, {"type": "string", "name": "f2"}],
        },
        True,
    ),
]


def _uses_empty_union(*names: str) -> bool:
    return "EMPTY_UNION_SCHEMA" in names


@pytest.mark.parametrize(("reader", "writer"), COMPATIBLE, ids=[f"{r}<-{w}" for r, w in COMPATIBLE])
def test_table_compatible(reader: str, writer: str) -> None:
    if _uses_empty_union(reader, writer):
        with pytest.raises(SchemaError, match="at least one branch"):
            table(AVRO_TABLE_SCHEMAS["EMPTY_UNION_SCHEMA"])
        return
    assert (
        table(AVRO_TABLE_SCHEMAS[reader]).compatibility_errors(table(AVRO_TABLE_SCHEMAS[writer]))
        == []
    )


@pytest.mark.parametrize(
    ("reader", "writer", "error_type", "path", "info"),
    INCOMPATIBLE,
    ids=[f"{r}<-{w}" for r, w, *_ in INCOMPATIBLE],
)
def test_table_incompatible(
    reader: str, writer: str, error_type: str, path: str, info: str
) -> None:
    messages = table(AVRO_TABLE_SCHEMAS[reader]).compatibility_errors(
        table(AVRO_TABLE_SCHEMAS[writer])
    )
    assert error_type in error_types(messages)
    expected_tail = f"additionalInfo:'{info}'}}"
    assert any(
        m.startswith(f"{{errorType:'{error_type}'")
        and f"'{path}'" in m
        and m.endswith(expected_tail)
        for m in messages
    ), messages


@pytest.mark.parametrize(("reader", "writer", "ok"), INLINE_CASES)
def test_table_inline_cases(reader: Any, writer: Any, ok: bool) -> None:
    assert (parse(reader).compatibility_errors(parse(writer)) == []) is ok


def test_union_of_many_missing_branches_reports_each() -> None:
    reader = table(AVRO_TABLE_SCHEMAS["INT_UNION_SCHEMA"])
    writer = table(AVRO_TABLE_SCHEMAS["INT_LONG_FLOAT_DOUBLE_UNION_SCHEMA"])
    messages = reader.compatibility_errors(writer)
    assert len(messages) == 3
    for path, kind in (("/1", "LONG"), ("/2", "FLOAT"), ("/3", "DOUBLE")):
        assert (
            "{errorType:'MISSING_UNION_BRANCH', description:'The new schema is missing a type"
            f" inside a union field at path '{path}' in the old schema',"
            f" additionalInfo:'reader union lacking writer type: {kind}'}}"
        ) in messages


# --- Confluent's messages ------------------------------------------------------------------------


def record(*fields: dict[str, Any], name: str = "R", namespace: str | None = "com.acme") -> dict:
    doc: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        doc["namespace"] = namespace
    doc["fields"] = list(fields)
    return doc


F1 = {"name": "f1", "type": "string"}
F2 = {"name": "f2", "type": "int"}
F2_DEFAULT = {"name": "f2", "type": "int", "default": 0}


def test_message_is_confluents_verbose_shape() -> None:
    new, old = parse(record(F1, F2)), parse(record(F1))
    assert new.compatibility_errors(old) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'f2' at path"
        " '/fields/1' in the new schema has no default value and is missing in the old schema',"
        " additionalInfo:'f2'}"
    ]


def test_each_message_keeps_its_own_path_and_detail() -> None:
    reader = parse(
        record(
            {"name": "a", "type": "int"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "x", "type": "string"},
        )
    )
    writer = parse(
        record(
            {"name": "a", "type": ["null", "int"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "C", "B"]}},
        )
    )
    assert reader.compatibility_errors(writer) == [
        "{errorType:'TYPE_MISMATCH', description:'The type (path '/fields/0/type') of a field in"
        " the new schema does not match with the old schema', additionalInfo:'reader type: INT"
        " not compatible with writer type: NULL'}",
        "{errorType:'MISSING_ENUM_SYMBOLS', description:'The new schema is missing enum symbols"
        " '[B, C]' at path '/fields/1/type/symbols' in the old schema', additionalInfo:'[B, C]'}",
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'x' at path"
        " '/fields/2' in the new schema has no default value and is missing in the old schema',"
        " additionalInfo:'x'}",
    ]


def test_name_mismatch_and_fixed_size_descriptions() -> None:
    a = parse({"type": "fixed", "name": "F", "size": 4})
    b = parse({"type": "fixed", "name": "G", "size": 8})
    assert a.compatibility_errors(b) == [
        "{errorType:'NAME_MISMATCH', description:'The name of the schema has changed (path"
        " '/name')', additionalInfo:'expected: G'}",
        "{errorType:'FIXED_SIZE_MISMATCH', description:'The size of FIXED type field at path"
        " '/size' in the new schema does not match with the old schema', additionalInfo:'expected:"
        " 8, found: 4'}",
    ]


def test_alias_relative_to_the_namespace_matches_the_old_name() -> None:
    old = parse(record(F1, name="Old"))
    new = parse({**record(F1, name="New"), "aliases": ["Old"]})
    assert new.compatibility_errors(old) == []
    assert parse(record(F1, name="Other")).compatibility_errors(old) != []


def test_different_schema_type_is_incompatible() -> None:
    class Other:
        schema_type = "JSON"

    assert parse('"string"').compatibility_errors(Other()) == [  # type: ignore[arg-type]
        "Incompatible because of different schema type"
    ]


# --- the seven levels --------------------------------------------------------------------------


def levels(new: AvroSchema, *old: AvroSchema) -> dict[str, list[str]]:
    versions = list(enumerate(old, start=1))
    return {level: incompatibilities(level, new, versions) for level in LEVELS}


def refused(result: dict[str, list[str]]) -> set[str]:
    return {level for level, errors in result.items() if errors}


def test_levels_add_field_with_default() -> None:
    assert refused(levels(parse(record(F1, F2_DEFAULT)), parse(record(F1)))) == set()


def test_levels_add_field_without_default() -> None:
    result = levels(parse(record(F1, F2)), parse(record(F1)))
    assert refused(result) == {"BACKWARD", "BACKWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}
    assert error_types(result["BACKWARD"]) == {"READER_FIELD_MISSING_DEFAULT_VALUE"}
    assert result["BACKWARD"][-3:] == [
        "{oldSchemaVersion: 1}",
        "{oldSchema: '" + parse(record(F1)).canonical() + "'}",
        "{compatibility: 'BACKWARD'}",
    ]


def test_levels_remove_field_without_default() -> None:
    result = levels(parse(record(F1)), parse(record(F1, F2)))
    assert refused(result) == {"FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}


def test_backward_transitive_catches_a_break_with_version_1_only() -> None:
    v1, v2 = parse(record(F1)), parse(record(F1, F2_DEFAULT))
    result = levels(parse(record(F1, F2)), v1, v2)
    assert refused(result) == {"BACKWARD_TRANSITIVE", "FULL_TRANSITIVE"}
    assert "{oldSchemaVersion: 1}" in result["BACKWARD_TRANSITIVE"]
    assert "{oldSchemaVersion: 2}" not in result["BACKWARD_TRANSITIVE"]


def test_forward_and_full_transitive_catch_a_break_with_version_1_only() -> None:
    v1, v2 = parse(record(F1, F2)), parse(record(F1, F2_DEFAULT))
    result = levels(parse(record(F1)), v1, v2)
    assert refused(result) == {"FORWARD_TRANSITIVE", "FULL_TRANSITIVE"}
    assert "{oldSchemaVersion: 1}" in result["FULL_TRANSITIVE"]


def test_type_change_breaks_every_checked_level() -> None:
    result = levels(parse(record({"name": "f1", "type": "int"})), parse(record(F1)))
    assert refused(result) == set(LEVELS) - {"NONE"}


# --- canonical and normal form -----------------------------------------------------------------


def test_canonical_drops_whitespace_and_keeps_key_order() -> None:
    text = '{ "name" : "R",\n  "type": "record", "fields": [ {"name": "a", "type": "int"} ] }'
    assert (
        parse(text).canonical()
        == '{"name":"R","type":"record","fields":[{"name":"a","type":"int"}]}'
    )


def test_canonical_bare_primitive_spellings_are_one() -> None:
    assert parse('{"type": "string"}').canonical() == '"string"'
    assert parse('"string"').canonical() == '"string"'
    a = parse(
        record(
            {"name": "a", "type": {"type": "string"}},
            {"name": "b", "type": [{"type": "null"}, "int"]},
        )
    )
    b = parse(record({"name": "a", "type": "string"}, {"name": "b", "type": ["null", "int"]}))
    assert a.canonical() == b.canonical()
    # A primitive with more than its type, and a default that looks like a schema, stay.
    logical = parse({"type": "long", "logicalType": "timestamp-millis"})
    assert logical.canonical() == '{"type":"long","logicalType":"timestamp-millis"}'
    m = parse(
        record(
            {
                "name": "m",
                "type": {"type": "map", "values": "string"},
                "default": {"type": "string"},
            }
        )
    )
    assert '"default":{"type":"string"}' in m.canonical()


def test_canonical_of_unicode_is_ascii_escaped_json() -> None:
    s = parse({**record(F1), "doc": "größe"})
    assert json.loads(s.canonical())["doc"] == "größe"
    assert s.canonical().isascii()


def test_normalized_namespace_and_full_name_agree() -> None:
    a = parse(
        {
            "namespace": "com.acme",
            "type": "record",
            "name": "R",
            "fields": [
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
                {"name": "again", "type": "E"},
            ],
        }
    )
    b = parse(
        {
            "fields": [
                {
                    "type": {"symbols": ["X", "Y"], "name": "com.acme.E", "type": "enum"},
                    "name": "e",
                },
                {"type": "com.acme.E", "name": "again"},
            ],
            "name": "com.acme.R",
            "type": "record",
        }
    )
    assert a.canonical() != b.canonical()
    assert a.normalized().canonical() == b.normalized().canonical()
    assert a.normalized().canonical() == (
        '{"type":"record","name":"com.acme.R","fields":['
        '{"type":{"type":"enum","name":"com.acme.E","symbols":["X","Y"]},"name":"e"},'
        '{"type":"com.acme.E","name":"again"}]}'
    )


def test_normalized_keeps_defaults_aliases_logical_types_and_properties() -> None:
    doc = {
        "type": "record",
        "name": "R",
        "namespace": "a.b",
        "aliases": ["Old"],
        "doc": "a record",
        "x-owner": "team",
        "fields": [
            {
                "name": "ts",
                "type": {"type": "long", "logicalType": "timestamp-millis"},
                "default": 0,
            },
            {
                "name": "n",
                "aliases": ["num"],
                "type": ["null", "int"],
                "default": None,
                "order": "descending",
            },
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
            },
        ],
    }
    normal = json.loads(parse(doc).normalized().canonical())
    assert list(normal) == ["type", "name", "fields", "aliases", "doc", "x-owner"]
    assert normal["name"] == "a.b.R" and normal["aliases"] == ["a.b.Old"]
    ts, n, d = normal["fields"]
    assert ts == {
        "type": {"type": "long", "logicalType": "timestamp-millis"},
        "name": "ts",
        "default": 0,
    }
    assert list(n) == ["type", "name", "default", "aliases", "order"]
    assert d["type"] == {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}


def test_normalized_is_a_fixed_point_and_stays_compatible() -> None:
    s = parse({"namespace": "n", "type": "record", "name": "R", "fields": [F1, F2_DEFAULT]})
    normal = s.normalized()
    assert normal.normalized().canonical() == normal.canonical()
    assert normal.compatibility_errors(s) == [] and s.compatibility_errors(normal) == []


def test_normalized_keeps_a_null_namespace_inside_a_namespaced_type() -> None:
    s = parse(
        record({"name": "g", "type": {"type": "fixed", "name": "G", "namespace": "", "size": 2}})
    )
    normal = s.normalized()
    assert '{"type":"fixed","name":"G","size":2,"namespace":""}' in normal.canonical()
    assert normal.compatibility_errors(s) == []


# --- references ----------------------------------------------------------------------------------

ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "com.acme",
    "fields": [
        {"name": "street", "type": "string"},
        {"name": "country", "type": "com.acme.Country"},
    ],
}
COUNTRY = {"type": "enum", "name": "Country", "namespace": "com.acme", "symbols": ["DE", "FR"]}
PERSON = {
    "type": "record",
    "name": "Person",
    "namespace": "com.acme",
    "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "Address"}],
}
REFS = {"com.acme.Address": ADDRESS, "com.acme.Country": COUNTRY}  # dependent one first


def test_references_resolve_in_any_order() -> None:
    person = parse(PERSON, REFS)
    assert person.canonical() == json.dumps(PERSON, separators=(",", ":"))
    value = {"name": "Ann", "home": {"street": "Main", "country": "FR"}}
    person.validate(value)
    assert person.decode(person.encode(value)) == value


def test_missing_reference_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="Address"):
        parse(PERSON)
    with pytest.raises(SchemaError, match="reference 'com.acme.Address'"):
        parse(PERSON, {"com.acme.Address": ADDRESS})
    with pytest.raises(SchemaError, match="reference 'com.acme.Country'"):
        parse(PERSON, {**REFS, "com.acme.Country": "{"})


def test_normalized_refers_to_referenced_types_by_name() -> None:
    normal = parse(PERSON, REFS).normalized()
    assert normal.canonical() == (
        '{"type":"record","name":"com.acme.Person","fields":[{"type":"string","name":"name"},'
        '{"type":"com.acme.Address","name":"home"}]}'
    )
    assert normal.references == parse(PERSON, REFS).references


def test_compatibility_follows_referenced_types() -> None:
    old = parse(PERSON, REFS)
    address_v2 = {**ADDRESS, "fields": [*ADDRESS["fields"], {"name": "zip", "type": "string"}]}
    new = parse(PERSON, {**REFS, "com.acme.Address": address_v2})
    assert new.compatibility_errors(old) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'zip' at path"
        " '/fields/1/type/fields/2' in the new schema has no default value and is missing in the"
        " old schema', additionalInfo:'zip'}"
    ]
    assert old.compatibility_errors(new) == []


def test_redefining_a_referenced_type_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="already in use"):
        parse({"type": "array", "items": COUNTRY}, {"com.acme.Country": COUNTRY})


# --- junk ----------------------------------------------------------------------------------------


def fields(*docs: str) -> str:
    return '{"type": "record", "name": "R", "fields": [' + ", ".join(docs) + "]}"


A_INT = '{"name": "a", "type": "int"}'
JUNK = [
    "{",
    "",
    "[]",
    '{"type": "record"}',
    '{"type": "record", "name": "R"}',
    "123",
    "null",
    '"Nope"',
    '{"type": "array"}',
    '{"type": "map", "values": "Nope"}',
    '{"type": {"type": "int"}}',
    '["int", "int"]',
    '["null", []]',
    '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
    '{"type": "enum", "name": "E", "symbols": [1]}',
    '{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}',
    '{"type": "fixed", "name": "F", "size": -1}',
    '{"type": "record", "name": "1R", "fields": []}',
    '{"type": "error", "name": "E", "fields": []}',
    '{"type": "record", "name": "R", "fields": {"a": "int"}}',
    fields(A_INT, A_INT),
    fields('{"name": "a", "type": {"type": "record", "name": "R", "fields": []}}'),
    # defaults that do not fit their field's type
    fields('{"name": "a", "type": "int", "default": "x"}'),
    fields('{"name": "a", "type": "int", "default": 2147483648}'),
    fields('{"name": "a", "type": "long", "default": 1.5}'),
    fields('{"name": "a", "type": "double", "default": "1.5"}'),
    fields('{"name": "a", "type": "string", "default": null}'),
    fields('{"name": "a", "type": "boolean", "default": 0}'),
    fields('{"name": "a", "type": ["null", "int"], "default": 1}'),
    fields('{"name": "a", "type": {"type": "array", "items": "int"}, "default": [1, "x"]}'),
    fields('{"name": "a", "type": {"type": "map", "values": "int"}, "default": {"k": null}}'),
    fields(
        '{"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "default": "B"}'
    ),
    fields(
        '{"name": "a", "type": {"type": "record", "name": "S", "fields": [{"name": "x", "type":'
        ' "int"}]}, "default": {}}'
    ),
    "[" * 10_000 + "]" * 10_000,
    '{"type": "array", "items": ' * 10_000 + '"int"' + "}" * 10_000,
]


def test_defaults_that_fit_are_accepted() -> None:
    parse(
        fields(
            '{"name": "a", "type": ["null", "int"], "default": null}',
            '{"name": "b", "type": ["int", "null"], "default": 3}',
            '{"name": "c", "type": "double", "default": 1}',
            '{"name": "d", "type": "bytes", "default": "\\u00ff"}',
            '{"name": "e", "type": {"type": "fixed", "name": "F", "size": 1}, "default": "x"}',
            '{"name": "f", "type": {"type": "record", "name": "S", "fields": [{"name": "x", "type":'
            ' "int"}, {"name": "y", "type": "int", "default": 1}]}, "default": {"x": 0}}',
            '{"name": "g", "type": {"type": "map", "values": ["null", "S"]},'
            ' "default": {"k": null}}',
        )
    )


@pytest.mark.parametrize("text", JUNK, ids=[j[:40] for j in JUNK])
def test_junk_is_a_schema_error(text: str) -> None:
    with pytest.raises(SchemaError):
        FORMAT.parse(text, {})


def test_not_a_string_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        FORMAT.parse(b'"int"', {})  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        FORMAT.parse('"int"', {"x": 5})  # type: ignore[dict-item]


def nested_arrays(levels: int) -> Any:
    return nested_arrays_of("int", levels)


def nested_arrays_of(doc: Any, levels: int) -> Any:
    for _ in range(levels):
        doc = {"type": "array", "items": doc}
    return doc


def test_nesting_up_to_the_limit_works_throughout() -> None:
    deep = parse(nested_arrays(MAX_DEPTH - 1))
    value: Any = 7
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    deep.validate(value)
    assert deep.decode(deep.encode(value)) == value
    assert deep.compatibility_errors(deep.normalized()) == []
    with pytest.raises(SchemaError, match="deeper than"):
        parse(nested_arrays(MAX_DEPTH))


def test_nesting_through_references_is_limited() -> None:
    # Each reference is shallow; chained, they are deeper than the limit.
    refs: dict[str, Any] = {}
    inner: Any = "int"
    for i in range(4):
        field = {"name": "x", "type": nested_arrays_of(inner, 60)}
        refs[f"D{i}"] = {"type": "record", "name": f"D{i}", "fields": [field]}
        inner = f"D{i}"
    with pytest.raises(SchemaError, match="deeper than"):
        parse({"type": "array", "items": inner}, refs)
    parse({"type": "array", "items": "D1"}, {k: refs[k] for k in ("D0", "D1")})


# --- values --------------------------------------------------------------------------------------

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["BUY", "SELL"]}},
        {"name": "tags", "type": {"type": "map", "values": "int"}},
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 2}},
        {"name": "blob", "type": "bytes"},
        {"name": "price", "type": "double"},
        {"name": "ok", "type": "boolean"},
    ],
}
GOOD_ORDER = {
    "id": 1,
    "note": "hi",
    "kind": "SELL",
    "tags": {"a": 1},
    "items": [{"sku": "x", "qty": 2}],
    "hash": b"ab",
    "blob": b"\x00\xff",
    "price": 1.5,
    "ok": True,
}


def test_validate_accepts_a_fitting_value() -> None:
    parse(ORDER).validate(GOOD_ORDER)
    parse(ORDER).validate({**GOOD_ORDER, "note": None, "price": 2})


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"id": "1"}, "Order.id"),
        ({"id": True}, "Order.id"),
        ({"note": 5}, "Order.note"),
        ({"note": {"string": "hi"}}, "Order.note"),
        ({"kind": "HOLD"}, "Order.kind"),
        ({"tags": {"a": "b"}}, "Order.tags"),
        ({"items": [{"sku": "x", "qty": 1.5}]}, "qty"),
        ({"hash": b"abc"}, "Order.hash"),
        ({"blob": "text"}, "Order.blob"),
        ({"ok": 1}, "Order.ok"),
    ],
)
def test_validate_names_the_field_that_does_not_fit(change: dict, where: str) -> None:
    with pytest.raises(ValueMismatch, match=f"field '[^']*{where}"):
        parse(ORDER).validate({**GOOD_ORDER, **change})


def test_validate_refuses_a_missing_field_and_a_wrong_shape() -> None:
    schema = parse(ORDER)
    value = dict(GOOD_ORDER)
    del value["kind"]
    with pytest.raises(ValueMismatch, match="Order.kind"):
        schema.validate(value)
    for junk in ([1], "x", None, 3):
        with pytest.raises(ValueMismatch):
            schema.validate(junk)


def test_encode_decode_round_trip() -> None:
    schema = parse(ORDER)
    payload = schema.encode(GOOD_ORDER)
    assert schema.decode(payload) == GOOD_ORDER
    assert (
        fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(ORDER)) == GOOD_ORDER
    )
    with pytest.raises(ValueMismatch):
        schema.encode({**GOOD_ORDER, "id": "x"})


def test_decode_with_a_newer_reader_takes_its_defaults() -> None:
    v1 = parse(record(F1))
    v2 = parse(record(F1, F2_DEFAULT, {"name": "f3", "type": ["null", "string"], "default": None}))
    assert v1.decode(v1.encode({"f1": "x"}), reader=v2) == {"f1": "x", "f2": 0, "f3": None}
    # and an older reader drops what it does not know
    assert v2.decode(v2.encode({"f1": "x", "f2": 5, "f3": "y"}), reader=v1) == {"f1": "x"}


def test_decode_refuses_bad_payloads_and_unreadable_readers() -> None:
    schema = parse(record(F1, F2))
    payload = schema.encode({"f1": "hello", "f2": 3})
    for bad in (b"", payload[:3], payload + b"\x00", b"\xff" * 12):
        with pytest.raises(ValueMismatch):
            schema.decode(bad)
    with pytest.raises(SchemaError):
        schema.decode(payload, reader=parse(record({"name": "f1", "type": "int"})))


def test_cross_check_with_the_confluent_client() -> None:
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = MockSchemaRegistryClient({"url": "mock://chronik"})
    text = json.dumps(ORDER)
    ctx = SerializationContext("orders", MessageField.VALUE)
    framed = AvroSerializer(client, text)(GOOD_ORDER, ctx)
    assert framed is not None and framed[0] == 0
    schema = parse(text)
    assert schema.decode(framed[5:]) == GOOD_ORDER
    (schema_id,) = struct.unpack(">I", framed[1:5])
    ours = b"\x00" + struct.pack(">I", schema_id) + schema.encode(GOOD_ORDER)
    assert ours == framed
    assert AvroDeserializer(client)(ours, ctx) == GOOD_ORDER


ITEM_SCHEMA = parse(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "s", "type": ["null", "string"]},
            {"name": "xs", "type": {"type": "array", "items": "double"}},
            {"name": "m", "type": {"type": "map", "values": "boolean"}},
            {"name": "b", "type": "bytes"},
        ],
    }
)


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "n": st.integers(min_value=-(2**63), max_value=2**63 - 1),
            "s": st.none() | st.text(),
            "xs": st.lists(st.floats(allow_nan=False)),
            "m": st.dictionaries(st.text(), st.booleans()),
            "b": st.binary(),
        }
    )
)
def test_property_round_trip(value: dict[str, Any]) -> None:
    ITEM_SCHEMA.validate(value)
    payload = ITEM_SCHEMA.encode(value)
    assert ITEM_SCHEMA.decode(payload) == value
    assert fastavro.schemaless_reader(io.BytesIO(payload), ITEM_SCHEMA.fastavro_schema) == value


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_property_random_bytes_never_crash_decode(payload: bytes) -> None:
    with contextlib.suppress(ValueMismatch):
        ITEM_SCHEMA.decode(payload)


def test_recursive_type_parses_compares_and_round_trips() -> None:
    node = parse(
        {
            "type": "record",
            "name": "Node",
            "fields": [
                {"name": "v", "type": "int"},
                {"name": "next", "type": ["null", "Node"], "default": None},
            ],
        }
    )
    value = {"v": 1, "next": {"v": 2, "next": None}}
    assert node.decode(node.encode(value)) == value
    assert node.compatibility_errors(node.normalized()) == []
    assert node.normalized().canonical() == (
        '{"type":"record","name":"Node","fields":[{"type":"int","name":"v"},'
        '{"type":["null","Node"],"name":"next","default":null}]}'
    )
