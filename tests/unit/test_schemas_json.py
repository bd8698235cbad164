"""The JSON Schema format: parsing and its refusals, references, canonical and normal forms,
value checks, and Confluent's compatibility rules (our own cases, written from the rules of
Confluent's ``SchemaDiff``; its example files are not Apache-licensed)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronik.schemas.compatibility import LEVELS, incompatibilities
from chronik.schemas.json_schema import (
    COMPATIBLE_LENIENT,
    COMPATIBLE_STRICT,
    FORMAT,
    MAX_DEPTH,
    JsonSchema,
)
from chronik.schemas.types import SchemaError, ValueMismatch

D4 = "http://json-schema.org/draft-04/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"
D2020 = "https://json-schema.org/draft/2020-12/schema"


def parse(schema: Any, references: dict[str, Any] | None = None) -> JsonSchema:
    refs = {k: json.dumps(v) for k, v in (references or {}).items()}
    return FORMAT.parse(json.dumps(schema), refs)


def obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}


@dataclass
class Case:
    name: str
    writer: Any  # Confluent's "original": the old schema in a BACKWARD check
    reader: Any  # Confluent's "update": the new schema
    changes: list[str]  # "TYPE #/path", every difference, compatible ones included
    compatible: bool
    writer_refs: dict[str, Any] | None = None
    reader_refs: dict[str, Any] | None = None


CASES = [
    # types
    Case("string to integer", STR, INT, ["TYPE_CHANGED #/"], False),
    Case("integer widened to number", INT, NUM, ["TYPE_EXTENDED #/"], True),
    Case("number narrowed to integer", NUM, INT, ["TYPE_NARROWED #/"], False),
    Case("string made nullable", STR, {"type": ["string", "null"]}, ["SUM_TYPE_EXTENDED #/"], True),
    Case(
        "nullable string made required",
        {"type": ["null", "string"]},
        STR,
        ["TYPE_CHANGED #/"],
        False,
    ),
    Case(
        "type list grows",
        {"type": ["integer", "boolean"]},
        {"type": ["boolean", "string", "integer"]},
        ["SUM_TYPE_EXTENDED #/"],
        True,
    ),
    Case("anything becomes true", obj({"a": STR}), True, [], True),
    Case("false writer reads anywhere", False, INT, [], True),
    Case(
        "annotations",
        {"type": "string", "title": "A", "description": "x", "default": "a"},
        {"type": "string", "title": "B", "description": "y", "default": "b"},
        ["TITLE_CHANGED #/", "DESCRIPTION_CHANGED #/", "DEFAULT_CHANGED #/"],
        True,
    ),
    # strings
    Case(
        "maxLength added",
        STR,
        {"type": "string", "maxLength": 8},
        ["MAX_LENGTH_ADDED #/maxLength"],
        False,
    ),
    Case(
        "maxLength decreased",
        {"type": "string", "maxLength": 8},
        {"type": "string", "maxLength": 4},
        ["MAX_LENGTH_DECREASED #/maxLength"],
        False,
    ),
    Case(
        "maxLength increased",
        {"type": "string", "maxLength": 8},
        {"type": "string", "maxLength": 16},
        ["MAX_LENGTH_INCREASED #/maxLength"],
        True,
    ),
    Case(
        "minLength increased",
        {"type": "string", "minLength": 2},
        {"type": "string", "minLength": 4},
        ["MIN_LENGTH_INCREASED #/minLength"],
        False,
    ),
    Case(
        "minLength removed",
        {"type": "string", "minLength": 2},
        STR,
        ["MIN_LENGTH_REMOVED #/minLength"],
        True,
    ),
    Case(
        "pattern added",
        STR,
        {"type": "string", "pattern": "^[a-z]+$"},
        ["PATTERN_ADDED #/pattern"],
        False,
    ),
    Case(
        "pattern changed",
        {"type": "string", "pattern": "^[a-z]+$"},
        {"type": "string", "pattern": "^[a-z0-9]+$"},
        ["PATTERN_CHANGED #/pattern"],
        False,
    ),
    Case(
        "pattern removed",
        {"type": "string", "pattern": "^a"},
        STR,
        ["PATTERN_REMOVED #/pattern"],
        True,
    ),
    # numbers
    Case(
        "maximum added", NUM, {"type": "number", "maximum": 100}, ["MAXIMUM_ADDED #/maximum"], False
    ),
    Case(
        "maximum decreased",
        {"type": "number", "maximum": 100},
        {"type": "number", "maximum": 50},
        ["MAXIMUM_DECREASED #/maximum"],
        False,
    ),
    Case(
        "maximum increased",
        {"type": "number", "maximum": 100},
        {"type": "number", "maximum": 1e3},
        ["MAXIMUM_INCREASED #/maximum"],
        True,
    ),
    Case(
        "minimum increased",
        {"type": "integer", "minimum": 0},
        {"type": "integer", "minimum": 1},
        ["MINIMUM_INCREASED #/minimum"],
        False,
    ),
    Case(
        "minimum removed",
        {"type": "integer", "minimum": 0},
        INT,
        ["MINIMUM_REMOVED #/minimum"],
        True,
    ),
    Case(
        "exclusiveMaximum added",
        NUM,
        {"type": "number", "exclusiveMaximum": 1},
        ["EXCLUSIVE_MAXIMUM_ADDED #/exclusiveMaximum"],
        False,
    ),
    Case(
        "exclusiveMinimum decreased",
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "number", "exclusiveMinimum": -1},
        ["EXCLUSIVE_MINIMUM_DECREASED #/exclusiveMinimum"],
        True,
    ),
    Case(
        "exclusiveMaximum decreased",
        {"type": "number", "exclusiveMaximum": 10},
        {"type": "number", "exclusiveMaximum": 5},
        ["EXCLUSIVE_MAXIMUM_DECREASED #/exclusiveMaximum"],
        False,
    ),
    Case(
        "draft 4 boolean exclusiveMaximum read as a limit",
        {"$schema": D4, "type": "number", "maximum": 10},
        {"$schema": D4, "type": "number", "maximum": 10, "exclusiveMaximum": True},
        ["MAXIMUM_REMOVED #/maximum", "EXCLUSIVE_MAXIMUM_ADDED #/exclusiveMaximum"],
        False,
    ),
    Case(
        "multipleOf expanded",
        {"type": "number", "multipleOf": 2},
        {"type": "number", "multipleOf": 4},
        ["MULTIPLE_OF_EXPANDED #/multipleOf"],
        False,
    ),
    Case(
        "multipleOf reduced",
        {"type": "number", "multipleOf": 0.5},
        {"type": "number", "multipleOf": 0.25},
        ["MULTIPLE_OF_REDUCED #/multipleOf"],
        True,
    ),
    Case(
        "multipleOf changed",
        {"type": "number", "multipleOf": 3},
        {"type": "number", "multipleOf": 5},
        ["MULTIPLE_OF_CHANGED #/multipleOf"],
        False,
    ),
    Case(
        "multipleOf added",
        INT,
        {"type": "integer", "multipleOf": 5},
        ["MULTIPLE_OF_ADDED #/multipleOf"],
        False,
    ),
    # objects: open content model (no additionalProperties)
    Case(
        "optional property added to open model",
        obj({"id": INT}),
        obj({"id": INT, "note": STR}),
        ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/note"],
        False,
    ),
    Case(
        "empty-schema property added to open model",
        obj({"id": INT}),
        obj({"id": INT, "x": {}}),
        ["PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL #/properties/x"],
        True,
    ),
    Case(
        "required property added to open model",
        obj({"id": INT}),
        obj({"id": INT, "note": STR}, required=["note"]),
        ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/note"],
        False,
    ),
    Case(
        "property removed from open reader",
        obj({"id": INT, "note": STR}),
        obj({"id": INT}),
        ["PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL #/properties/note"],
        True,
    ),
    # objects: closed content model
    Case(
        "optional property added to closed model",
        obj({"id": INT}, additionalProperties=False),
        obj({"id": INT, "note": STR}, additionalProperties=False),
        ["OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/note"],
        True,
    ),
    Case(
        "required property added to closed model",
        obj({"id": INT}, additionalProperties=False),
        obj({"id": INT, "note": STR}, required=["note"], additionalProperties=False),
        ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/note"],
        False,
    ),
    Case(
        "required property with default added to closed model",
        obj({"id": INT}, additionalProperties=False),
        obj(
            {"id": INT, "n": {"type": "integer", "default": 0}},
            required=["n"],
            additionalProperties=False,
        ),
        ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/n"],
        True,
    ),
    Case(
        "property removed from closed reader",
        obj({"id": INT, "note": STR}, additionalProperties=False),
        obj({"id": INT}, additionalProperties=False),
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/note"],
        False,
    ),
    Case(
        "false property removed from closed reader",
        obj({"id": INT, "gone": False}, additionalProperties=False),
        obj({"id": INT}, additionalProperties=False),
        ["PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/gone"],
        True,
    ),
    # objects: partially open content model
    Case(
        "removed property covered by additionalProperties",
        obj({"id": INT, "note": STR}, additionalProperties=STR),
        obj({"id": INT}, additionalProperties=STR),
        ["PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/note"],
        True,
    ),
    Case(
        "removed property not covered by additionalProperties",
        obj({"id": INT, "n": INT}, additionalProperties=STR),
        obj({"id": INT}, additionalProperties=STR),
        [
            "TYPE_CHANGED #/properties/n",
            "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/n",
        ],
        False,
    ),
    Case(
        "added property covered by patternProperties",
        obj({"id": INT}, patternProperties={"^x-": STR}, additionalProperties=False),
        obj(
            {"id": INT, "x-tag": {"type": "string", "maxLength": 9}},
            patternProperties={"^x-": STR},
            additionalProperties=False,
        ),
        [
            "MAX_LENGTH_ADDED #/properties/x-tag/maxLength",
            "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/x-tag",
            "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/x-tag",
        ],
        False,
    ),
    Case(
        "added property matching the partial model",
        obj({"id": INT}, additionalProperties=NUM),
        obj({"id": INT, "score": INT}, additionalProperties=NUM),
        [
            "TYPE_NARROWED #/properties/score",
            "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/score",
            "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/score",
        ],
        False,
    ),
    Case(
        "added property wider than the partial model",
        obj({"id": INT}, additionalProperties=INT),
        obj({"id": INT, "score": NUM}, additionalProperties=INT),
        [
            "TYPE_EXTENDED #/properties/score",
            "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/score",
            "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/score",
        ],
        True,
    ),
    # required
    Case(
        "required added",
        obj({"id": INT}),
        obj({"id": INT}, required=["id"]),
        ["REQUIRED_ATTRIBUTE_ADDED #/required/id"],
        False,
    ),
    Case(
        "required with default added",
        obj({"n": {"type": "integer", "default": 1}}),
        obj({"n": {"type": "integer", "default": 1}}, required=["n"]),
        ["REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED #/required/n"],
        True,
    ),
    Case(
        "required removed",
        obj({"id": INT}, required=["id"]),
        obj({"id": INT}),
        ["REQUIRED_ATTRIBUTE_REMOVED #/required/id"],
        True,
    ),
    # additionalProperties
    Case(
        "additionalProperties false dropped",
        obj({}, additionalProperties=False),
        obj({}),
        ["ADDITIONAL_PROPERTIES_ADDED #/additionalProperties"],
        True,
    ),
    Case(
        "additionalProperties false added",
        obj({}),
        obj({}, additionalProperties=False),
        ["ADDITIONAL_PROPERTIES_REMOVED #/additionalProperties"],
        False,
    ),
    Case(
        "additionalProperties schema added",
        obj({}),
        obj({}, additionalProperties=STR),
        ["ADDITIONAL_PROPERTIES_NARROWED #/additionalProperties"],
        False,
    ),
    Case(
        "additionalProperties schema dropped",
        obj({}, additionalProperties=STR),
        obj({}),
        ["ADDITIONAL_PROPERTIES_EXTENDED #/additionalProperties"],
        True,
    ),
    Case(
        "additionalProperties schema changed",
        obj({}, additionalProperties=STR),
        obj({}, additionalProperties=INT),
        ["TYPE_CHANGED #/additionalProperties"],
        False,
    ),
    Case(
        "unevaluatedProperties false added",
        {"$schema": D2020, **obj({})},
        {"$schema": D2020, **obj({}, unevaluatedProperties=False)},
        ["UNEVALUATED_PROPERTIES_REMOVED #/unevaluatedProperties"],
        False,
    ),
    # property counts
    Case(
        "maxProperties decreased",
        {"type": "object", "maxProperties": 5},
        {"type": "object", "maxProperties": 3},
        ["MAX_PROPERTIES_DECREASED #/maxProperties"],
        False,
    ),
    Case(
        "maxProperties removed",
        {"type": "object", "maxProperties": 5},
        {"type": "object"},
        ["MAX_PROPERTIES_REMOVED #/maxProperties"],
        True,
    ),
    Case(
        "minProperties added",
        {"type": "object"},
        {"type": "object", "minProperties": 1},
        ["MIN_PROPERTIES_ADDED #/minProperties"],
        False,
    ),
    # dependencies
    Case(
        "dependency array added",
        obj({"card": STR, "cvv": STR}),
        obj({"card": STR, "cvv": STR}, dependencies={"card": ["cvv"]}),
        ["DEPENDENCY_ARRAY_ADDED #/dependencies/card"],
        False,
    ),
    Case(
        "dependency array extended",
        obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b"]}),
        obj({"a": STR, "b": STR, "c": STR}, dependencies={"a": ["b", "c"]}),
        ["DEPENDENCY_ARRAY_EXTENDED #/dependencies/a"],
        False,
    ),
    Case(
        "dependentRequired narrowed (2019-09)",
        {
            "$schema": D2019,
            **obj({"a": STR, "b": STR, "c": STR}, dependentRequired={"a": ["b", "c"]}),
        },
        {"$schema": D2019, **obj({"a": STR, "b": STR, "c": STR}, dependentRequired={"a": ["c"]})},
        ["DEPENDENCY_ARRAY_NARROWED #/dependencies/a"],
        True,
    ),
    Case(
        "dependency schema removed",
        obj({"a": STR}, dependencies={"a": {"required": ["b"]}}),
        obj({"a": STR}),
        ["DEPENDENCY_SCHEMA_REMOVED #/dependencies/a"],
        True,
    ),
    Case(
        "dependency schema added",
        obj({"a": STR}),
        obj({"a": STR}, dependencies={"a": {"required": ["b"]}}),
        ["DEPENDENCY_SCHEMA_ADDED #/dependencies/a"],
        False,
    ),
    # arrays
    Case(
        "items schema added",
        {"type": "array"},
        {"type": "array", "items": STR},
        ["SCHEMA_ADDED #/items"],
        False,
    ),
    Case(
        "items schema removed",
        {"type": "array", "items": STR},
        {"type": "array"},
        ["SCHEMA_REMOVED #/items"],
        True,
    ),
    Case(
        "items type changed",
        {"type": "array", "items": STR},
        {"type": "array", "items": INT},
        ["TYPE_CHANGED #/items"],
        False,
    ),
    Case(
        "maxItems added",
        {"type": "array"},
        {"type": "array", "maxItems": 3},
        ["MAX_ITEMS_ADDED #/maxItems"],
        False,
    ),
    Case(
        "minItems decreased",
        {"type": "array", "minItems": 2},
        {"type": "array", "minItems": 1},
        ["MIN_ITEMS_DECREASED #/minItems"],
        True,
    ),
    Case(
        "uniqueItems added",
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        ["UNIQUE_ITEMS_ADDED #/uniqueItems"],
        False,
    ),
    Case(
        "uniqueItems removed",
        {"type": "array", "uniqueItems": True},
        {"type": "array"},
        ["UNIQUE_ITEMS_REMOVED #/uniqueItems"],
        True,
    ),
    Case(
        "minContains increased (2020-12)",
        {"$schema": D2020, "type": "array", "contains": INT, "minContains": 1},
        {"$schema": D2020, "type": "array", "contains": INT, "minContains": 2},
        ["MIN_CONTAINS_INCREASED #/minContains"],
        False,
    ),
    # tuples
    Case(
        "tuple item removed, open reader",
        {"type": "array", "items": [STR, INT]},
        {"type": "array", "items": [STR]},
        ["ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL #/items/1"],
        True,
    ),
    Case(
        "tuple item added, open writer",
        {"type": "array", "items": [STR]},
        {"type": "array", "items": [STR, {"type": "boolean"}]},
        ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL #/items/1"],
        False,
    ),
    Case(
        "tuple item added, closed writer",
        {"type": "array", "items": [STR], "additionalItems": False},
        {"type": "array", "items": [STR, INT], "additionalItems": False},
        ["ITEM_ADDED_TO_CLOSED_CONTENT_MODEL #/items/1"],
        True,
    ),
    Case(
        "tuple item removed, closed reader",
        {"type": "array", "items": [STR, INT], "additionalItems": False},
        {"type": "array", "items": [STR], "additionalItems": False},
        ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL #/items/1"],
        False,
    ),
    Case(
        "tuple item removed, covered by additionalItems",
        {"type": "array", "items": [STR, INT], "additionalItems": NUM},
        {"type": "array", "items": [STR], "additionalItems": NUM},
        [
            "TYPE_EXTENDED #/items/1",
            "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1",
        ],
        True,
    ),
    Case(
        "tuple item type changed",
        {"type": "array", "items": [STR, INT]},
        {"type": "array", "items": [INT, INT]},
        ["TYPE_CHANGED #/items/0"],
        False,
    ),
    Case(
        "additionalItems closed",
        {"type": "array", "items": [STR]},
        {"type": "array", "items": [STR], "additionalItems": False},
        ["ADDITIONAL_ITEMS_REMOVED #/additionalItems"],
        False,
    ),
    Case(
        "prefixItems item added, closed writer (2020-12)",
        {"$schema": D2020, "type": "array", "prefixItems": [STR], "items": False},
        {"$schema": D2020, "type": "array", "prefixItems": [STR, INT], "items": False},
        ["ITEM_ADDED_TO_CLOSED_CONTENT_MODEL #/items/1"],
        True,
    ),
    # enum and const
    Case(
        "enum extended",
        {"enum": ["red", "green"]},
        {"enum": ["green", "blue", "red"]},
        ["ENUM_ARRAY_EXTENDED #/enum"],
        True,
    ),
    Case(
        "enum narrowed",
        {"enum": ["red", "green"]},
        {"enum": ["red"]},
        ["ENUM_ARRAY_NARROWED #/enum"],
        False,
    ),
    Case("enum changed", {"enum": [1, 2]}, {"enum": [2, 3]}, ["ENUM_ARRAY_CHANGED #/enum"], False),
    Case(
        "typed enum extended",
        {"type": "string", "enum": ["a"]},
        {"type": "string", "enum": ["a", "b"]},
        ["ENUM_ARRAY_EXTENDED #/allOf/0/enum"],
        True,
    ),
    Case(
        "typed enum dropped",
        {"type": "string", "enum": ["a"]},
        STR,
        ["PRODUCT_TYPE_NARROWED #/"],
        True,
    ),
    Case(
        "const changed",
        obj({"kind": {"const": "v1"}}),
        obj({"kind": {"const": "v2"}}),
        ["ENUM_ARRAY_CHANGED #/properties/kind/const"],
        False,
    ),
    # combined
    Case(
        "oneOf branch added",
        {"oneOf": [STR, INT]},
        {"oneOf": [STR, INT, {"type": "null"}]},
        ["SUM_TYPE_EXTENDED #/"],
        True,
    ),
    Case(
        "anyOf branch removed",
        {"anyOf": [STR, INT]},
        {"anyOf": [INT]},
        ["SUM_TYPE_NARROWED #/"],
        False,
    ),
    Case(
        "anyOf branch replaced",
        {"anyOf": [STR, INT]},
        {"anyOf": [STR, {"type": "boolean"}]},
        ["COMBINED_TYPE_SUBSCHEMAS_CHANGED #/"],
        False,
    ),
    Case(
        "anyOf branches reordered and widened",
        {"anyOf": [STR, INT]},
        {"anyOf": [NUM, STR]},
        ["TYPE_EXTENDED #/anyOf/1"],
        True,
    ),
    Case(
        "allOf grows",
        {"allOf": [obj({"a": STR})]},
        {"allOf": [obj({"a": STR}), {"required": ["a"]}]},
        ["PRODUCT_TYPE_EXTENDED #/"],
        False,
    ),
    Case(
        "allOf shrinks",
        {"allOf": [obj({"a": STR}), {"required": ["a"]}]},
        {"allOf": [obj({"a": STR})]},
        ["PRODUCT_TYPE_NARROWED #/"],
        True,
    ),
    Case(
        "oneOf to anyOf",
        {"oneOf": [STR, INT]},
        {"anyOf": [STR, INT]},
        ["COMBINED_TYPE_EXTENDED #/"],
        True,
    ),
    Case(
        "anyOf to oneOf",
        {"anyOf": [STR, INT]},
        {"oneOf": [STR, INT]},
        ["COMBINED_TYPE_CHANGED #/"],
        False,
    ),
    Case("plain to anyOf", STR, {"anyOf": [INT, STR]}, ["SUM_TYPE_EXTENDED #/"], True),
    Case(
        "allOf to one of its parts",
        {"allOf": [STR, {"maxLength": 3}]},
        STR,
        ["PRODUCT_TYPE_NARROWED #/"],
        True,
    ),
    Case(
        "difference inside a matched branch",
        {"oneOf": [{"type": "string", "maxLength": 3}, INT]},
        {"oneOf": [INT, {"type": "string", "maxLength": 5}]},
        ["MAX_LENGTH_INCREASED #/oneOf/0/maxLength"],
        True,
    ),
    # not
    Case(
        "not widened",
        {"not": STR},
        {"not": {"type": ["string", "null"]}},
        ["NOT_TYPE_EXTENDED #/not"],
        False,
    ),
    Case(
        "not narrowed",
        {"not": {"type": ["string", "null"]}},
        {"not": STR},
        ["NOT_TYPE_NARROWED #/not"],
        True,
    ),
    # $ref
    Case(
        "change behind a $ref",
        {"definitions": {"id": STR}, **obj({"id": {"$ref": "#/definitions/id"}})},
        {"definitions": {"id": INT}, **obj({"id": {"$ref": "#/definitions/id"}})},
        ["TYPE_CHANGED #/properties/id"],
        False,
    ),
    Case(
        "inline schema moved to $defs",
        {"$schema": D2020, **obj({"id": STR})},
        {"$schema": D2020, "$defs": {"id": STR}, **obj({"id": {"$ref": "#/$defs/id"}})},
        [],
        True,
    ),
    Case(
        "recursive schema, compatible change",
        {
            "definitions": {"node": obj({"value": INT, "next": {"$ref": "#/definitions/node"}})},
            "$ref": "#/definitions/node",
        },
        {
            "definitions": {"node": obj({"value": NUM, "next": {"$ref": "#/definitions/node"}})},
            "$ref": "#/definitions/node",
        },
        ["TYPE_EXTENDED #/properties/value"],
        True,
    ),
    Case(
        "recursive schema, incompatible change",
        obj({"value": INT, "children": {"type": "array", "items": {"$ref": "#"}}}),
        obj({"value": STR, "children": {"type": "array", "items": {"$ref": "#"}}}),
        [
            "TYPE_CHANGED #/properties/value",
            # the cycle is revisited with the pair known incompatible
            "TYPE_CHANGED #/properties/children/items/properties/value",
        ],
        False,
    ),
    Case(
        "change in a referenced schema",
        obj({"who": {"$ref": "person.json"}}),
        obj({"who": {"$ref": "person.json"}}),
        ["TYPE_CHANGED #/properties/who/properties/age"],
        False,
        writer_refs={"person.json": obj({"age": INT})},
        reader_refs={"person.json": obj({"age": STR})},
    ),
    # the remaining difference types, briefly
    Case("id changed", {"$id": "urn:a", **STR}, {"$id": "urn:b", **STR}, ["ID_CHANGED #/"], True),
    Case(
        "maxLength and friends removed",
        {"type": "string", "maxLength": 3, "minLength": 4},
        {"type": "string", "minLength": 1},
        ["MAX_LENGTH_REMOVED #/maxLength", "MIN_LENGTH_DECREASED #/minLength"],
        True,
    ),
    Case(
        "number bounds relaxed",
        {
            "type": "number",
            "minimum": 1,
            "exclusiveMaximum": 9,
            "exclusiveMinimum": 0,
            "multipleOf": 2,
        },
        {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
        [
            "MINIMUM_DECREASED #/minimum",
            "EXCLUSIVE_MAXIMUM_INCREASED #/exclusiveMaximum",
            "EXCLUSIVE_MINIMUM_REMOVED #/exclusiveMinimum",
            "MULTIPLE_OF_REMOVED #/multipleOf",
        ],
        True,
    ),
    Case(
        "exclusiveMaximum removed",
        {"type": "number", "exclusiveMaximum": 9},
        NUM,
        ["EXCLUSIVE_MAXIMUM_REMOVED #/exclusiveMaximum"],
        True,
    ),
    Case(
        "object counts relaxed",
        {"type": "object", "maxProperties": 3, "minProperties": 2},
        {"type": "object", "maxProperties": 4, "minProperties": 1},
        ["MAX_PROPERTIES_INCREASED #/maxProperties", "MIN_PROPERTIES_DECREASED #/minProperties"],
        True,
    ),
    Case(
        "minProperties removed",
        {"type": "object", "minProperties": 2},
        {"type": "object"},
        ["MIN_PROPERTIES_REMOVED #/minProperties"],
        True,
    ),
    Case(
        "dependency array removed",
        obj({"a": STR}, dependencies={"a": ["b"]}),
        obj({"a": STR}),
        ["DEPENDENCY_ARRAY_REMOVED #/dependencies/a"],
        True,
    ),
    Case(
        "array counts relaxed",
        {"type": "array", "maxItems": 3, "minItems": 1},
        {"type": "array", "maxItems": 5},
        ["MAX_ITEMS_INCREASED #/maxItems", "MIN_ITEMS_REMOVED #/minItems"],
        True,
    ),
    Case(
        "maxItems removed",
        {"type": "array", "maxItems": 3},
        {"type": "array"},
        ["MAX_ITEMS_REMOVED #/maxItems"],
        True,
    ),
    Case(
        "contains counts relaxed (2020-12)",
        {"$schema": D2020, "type": "array", "contains": INT, "maxContains": 2, "minContains": 2},
        {"$schema": D2020, "type": "array", "contains": INT, "maxContains": 3, "minContains": 1},
        ["MAX_CONTAINS_INCREASED #/maxContains", "MIN_CONTAINS_DECREASED #/minContains"],
        True,
    ),
    Case(
        "contains counts dropped (2020-12)",
        {"$schema": D2020, "type": "array", "contains": INT, "maxContains": 2, "minContains": 2},
        {"$schema": D2020, "type": "array", "contains": INT},
        ["MAX_CONTAINS_REMOVED #/maxContains", "MIN_CONTAINS_REMOVED #/minContains"],
        True,
    ),
    Case(
        "tuple item with empty schema added, open writer",
        {"type": "array", "items": [STR]},
        {"type": "array", "items": [STR, {}]},
        ["ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL #/items/1"],
        True,
    ),
    Case(
        "false tuple item removed, closed reader",
        {"type": "array", "items": [STR, False], "additionalItems": False},
        {"type": "array", "items": [STR], "additionalItems": False},
        ["ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL #/items/1"],
        True,
    ),
    Case(
        "tuple item added, covered by additionalItems",
        {"type": "array", "items": [STR], "additionalItems": NUM},
        {"type": "array", "items": [STR, NUM]},
        [
            "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1",
            "ADDITIONAL_ITEMS_EXTENDED #/additionalItems",
        ],
        True,
    ),
    Case(
        "additionalItems opened",
        {"type": "array", "items": [STR], "additionalItems": False},
        {"type": "array", "items": [STR]},
        ["ADDITIONAL_ITEMS_ADDED #/additionalItems"],
        True,
    ),
    Case(
        "additionalItems schema added",
        {"type": "array", "items": [STR]},
        {"type": "array", "items": [STR], "additionalItems": INT},
        ["ADDITIONAL_ITEMS_NARROWED #/additionalItems"],
        False,
    ),
    Case(
        "unevaluatedProperties false dropped",
        {"$schema": D2020, **obj({}, unevaluatedProperties=False)},
        {"$schema": D2020, **obj({})},
        ["UNEVALUATED_PROPERTIES_ADDED #/unevaluatedProperties"],
        True,
    ),
    Case(
        "unevaluatedProperties schema dropped",
        {"$schema": D2020, **obj({}, unevaluatedProperties=STR)},
        {"$schema": D2020, **obj({})},
        ["UNEVALUATED_PROPERTIES_EXTENDED #/unevaluatedProperties"],
        True,
    ),
    Case(
        "unevaluatedProperties schema added",
        {"$schema": D2020, **obj({})},
        {"$schema": D2020, **obj({}, unevaluatedProperties=STR)},
        ["UNEVALUATED_PROPERTIES_NARROWED #/unevaluatedProperties"],
        False,
    ),
    Case(
        "unevaluatedItems false dropped",
        {"$schema": D2020, "type": "array", "unevaluatedItems": False},
        {"$schema": D2020, "type": "array"},
        ["UNEVALUATED_ITEMS_ADDED #/unevaluatedItems"],
        True,
    ),
    Case(
        "unevaluatedItems schema dropped",
        {"$schema": D2020, "type": "array", "unevaluatedItems": STR},
        {"$schema": D2020, "type": "array"},
        ["UNEVALUATED_ITEMS_EXTENDED #/unevaluatedItems"],
        True,
    ),
    Case(
        "unevaluatedItems false added",
        {"$schema": D2020, "type": "array"},
        {"$schema": D2020, "type": "array", "unevaluatedItems": False},
        ["UNEVALUATED_ITEMS_REMOVED #/unevaluatedItems"],
        False,
    ),
    Case(
        "dependency array changed",
        obj({"a": STR}, dependencies={"a": ["b"]}),
        obj({"a": STR}, dependencies={"a": ["c"]}),
        ["DEPENDENCY_ARRAY_CHANGED #/dependencies/a"],
        False,
    ),
    Case(
        "required property with default added to open model",
        obj({"id": INT}),
        obj({"id": INT, "n": {"type": "integer", "default": 0}}, required=["n"]),
        ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL #/properties/n"],
        False,
    ),
    Case(
        "tuple item added, not covered by additionalItems",
        {"type": "array", "items": [STR], "additionalItems": INT},
        {"type": "array", "items": [STR, STR], "additionalItems": INT},
        [
            "TYPE_CHANGED #/items/1",
            "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1",
        ],
        False,
    ),
    Case(
        "tuple item removed, not covered by additionalItems",
        {"type": "array", "items": [STR, STR], "additionalItems": INT},
        {"type": "array", "items": [STR], "additionalItems": INT},
        [
            "TYPE_CHANGED #/items/1",
            "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1",
        ],
        False,
    ),
    Case(
        "array counts tightened",
        {"type": "array", "maxItems": 5, "minItems": 1},
        {"type": "array", "maxItems": 3, "minItems": 2},
        ["MAX_ITEMS_DECREASED #/maxItems", "MIN_ITEMS_INCREASED #/minItems"],
        False,
    ),
]


def change_list(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    return sorted(f"{d.type} {d.path}" for d in reader.differences(writer))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compatibility_case(case: Case) -> None:
    writer = parse(case.writer, case.writer_refs)
    reader = parse(case.reader, case.reader_refs)
    assert change_list(reader, writer) == sorted(case.changes)
    errors = reader.compatibility_errors(writer)
    assert (not errors) == case.compatible
    incompatible = {c.split()[0] for c in case.changes} - COMPATIBLE_STRICT
    named = {re.match(r"\{errorType:'([A-Z_]+)'", e).group(1) for e in errors}  # type: ignore[union-attr]
    assert named == incompatible


def test_case_table_covers_both_verdicts_and_many_types() -> None:
    assert len(CASES) >= 40
    assert {c.compatible for c in CASES} == {True, False}
    types = {change.split()[0] for c in CASES for change in c.changes}
    assert len(types) >= 100


def test_message_shape_names_type_path_and_detail() -> None:
    writer = parse({"type": "string", "maxLength": 8})
    reader = parse({"type": "string", "maxLength": 4})
    [message] = reader.compatibility_errors(writer)
    assert re.fullmatch(r"\{errorType:'[A-Z_]+', description:'.*', additionalInfo:'.*'\}", message)
    assert "errorType:'MAX_LENGTH_DECREASED'" in message
    assert "'#/maxLength'" in message
    assert "reader maxLength: 4, writer maxLength: 8" in message


def test_lenient_policy_is_a_superset() -> None:
    assert COMPATIBLE_STRICT < COMPATIBLE_LENIENT
    assert "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in COMPATIBLE_LENIENT - COMPATIBLE_STRICT


def test_different_schema_type_is_incompatible() -> None:
    class Other:
        schema_type = "AVRO"

    [message] = parse(STR).compatibility_errors(Other())  # type: ignore[arg-type]
    assert "different schema type" in message


def test_mutually_recursive_definitions_terminate() -> None:
    defs = {
        f"T{i}": {
            "type": "object",
            "properties": {
                "id": INT if i else STR,
                "next": {
                    "anyOf": [
                        {"$ref": f"#/definitions/T{(i + 1) % 6}"},
                        {"$ref": f"#/definitions/T{(i + 2) % 6}"},
                        {"type": "null"},
                    ]
                },
            },
        }
        for i in range(6)
    }
    writer = parse({"definitions": defs, "$ref": "#/definitions/T0"})
    changed = json.loads(json.dumps(defs))
    changed["T3"]["properties"]["id"] = {"type": "boolean"}
    reader = parse({"definitions": changed, "$ref": "#/definitions/T0"})
    started = time.monotonic()
    assert writer.compatibility_errors(writer) == []
    assert reader.compatibility_errors(writer) != []
    assert time.monotonic() - started < 10


# -- the seven levels ------------------------------------------------------------------------

OPEN_V1 = parse(obj({"a": STR}))
OPEN_V2 = parse(obj({"a": STR, "b": STR}))  # a property appears in an open model
CLOSED_V1 = parse(obj({"a": STR}, additionalProperties=False))
CLOSED_V2 = parse(obj({"a": STR, "b": STR}, additionalProperties=False))
TITLED = parse({**obj({"a": STR}, additionalProperties=False), "title": "t"})


@pytest.mark.parametrize(
    ("level", "new", "old", "ok"),
    [
        ("NONE", parse(INT), CLOSED_V1, True),
        # adding an optional property to a closed model: new reads old, old cannot read new
        ("BACKWARD", CLOSED_V2, CLOSED_V1, True),
        ("FORWARD", CLOSED_V2, CLOSED_V1, False),
        ("FULL", CLOSED_V2, CLOSED_V1, False),
        # adding one to an open model: old reads new, new cannot read old
        ("BACKWARD", OPEN_V2, OPEN_V1, False),
        ("FORWARD", OPEN_V2, OPEN_V1, True),
        ("FULL", OPEN_V2, OPEN_V1, False),
        ("FULL", TITLED, CLOSED_V1, True),
    ],
)
def test_levels_against_the_latest_version(
    level: str, new: JsonSchema, old: JsonSchema, ok: bool
) -> None:
    errors = incompatibilities(level, new, [(1, old)])
    assert (errors == []) == ok
    if not ok:
        assert errors[-1] == f"{{compatibility: '{level}'}}"
        assert "{oldSchemaVersion: 1}" in errors


@pytest.mark.parametrize("level", LEVELS)
def test_levels_transitive_reach_every_version(level: str) -> None:
    # v2 and the new schema are the same; only v1, two versions back, disagrees.
    history = [(1, parse(STR)), (2, parse(INT))]
    errors = incompatibilities(level, parse(INT), history)
    if level.endswith("_TRANSITIVE"):
        assert any("errorType:'TYPE_CHANGED'" in e for e in errors)
        assert "{oldSchemaVersion: 1}" in errors
        assert "{oldSchemaVersion: 2}" not in errors
    else:
        assert errors == []


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        ("[1, 2]", "object or boolean"),
        ('"string"', "object or boolean"),
        ("12", "object or boolean"),
        ('{"minimum": NaN}', "not valid JSON"),
        ('{"type": "strin"}', "$.type"),
        ('{"type": "object", "required": "id"}', "$.required"),
        ('{"maxLength": -1}', "$.maxLength"),
        ('{"pattern": "(unclosed"}', "regex"),
        ('{"$schema": "http://example.com/my-dialect"}', "unknown '$schema'"),
        (json.dumps({"$schema": D4, "properties": {"a": True}}), "draft 4"),
        ('{"$ref": "#/definitions/missing"}', "does not resolve"),
        ('{"$ref": "https://example.com/remote.json"}', "never fetched"),
        ('{"properties": {"a": {"$ref": "other.json#/definitions/x"}}}', "does not resolve"),
        ("[" * 50_000 + "]" * 50_000, "nested deeper"),
    ],
)
def test_parse_refuses(text: str, fragment: str) -> None:
    with pytest.raises(SchemaError) as info:
        FORMAT.parse(text, {})
    assert fragment in str(info.value)


def test_parse_refuses_non_text_and_bad_references() -> None:
    with pytest.raises(SchemaError):
        FORMAT.parse(None, {})  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="reference 'other.json'"):
        FORMAT.parse('{"$ref": "other.json"}', {"other.json": "{nope"})
    with pytest.raises(SchemaError, match="reference 'other.json'"):
        FORMAT.parse('{"$ref": "other.json"}', {"other.json": '{"type": 1}'})
    with pytest.raises(SchemaError, match="does not resolve"):
        FORMAT.parse('{"$ref": "a.json"}', {"a.json": '{"$ref": "b.json"}'})


def test_depth_limit() -> None:
    def nested(levels: int) -> str:
        schema: dict[str, Any] = {"type": "string"}
        for _ in range(levels - 1):
            schema = {"type": "array", "items": schema}
        return json.dumps(schema)

    deep = FORMAT.parse(nested(MAX_DEPTH - 1), {})
    assert deep.compatibility_errors(deep) == []
    value: Any = "x"
    for _ in range(MAX_DEPTH - 2):
        value = [value]
    deep.validate(value)
    with pytest.raises(SchemaError, match="nested deeper than 200"):
        FORMAT.parse(nested(MAX_DEPTH + 1), {})


def test_boolean_schemas_and_drafts() -> None:
    assert parse(True).canonical() == "true"
    parse(False)
    for dialect in (D4, "http://json-schema.org/draft-06/schema", D2019, D2020):
        parse({"$schema": dialect, "type": "object"})
    with pytest.raises(SchemaError):
        parse({"$schema": D4, "type": "number", "exclusiveMinimum": 3})  # a boolean in draft 4


def test_references_resolve_by_name_and_relative_to_the_root_id() -> None:
    refs = {
        "address.json": {
            "type": "object",
            "properties": {"zip": {"$ref": "zip.json"}},
            "required": ["zip"],
        },
        "zip.json": {"type": "string", "pattern": "^[0-9]{5}$"},
    }
    schema = parse(obj({"home": {"$ref": "address.json"}}), refs)
    schema.validate({"home": {"zip": "12345"}})
    with pytest.raises(ValueMismatch, match=r"\$\.home\.zip"):
        schema.validate({"home": {"zip": "12"}})
    rooted = parse(
        {
            "$id": "https://example.com/schemas/order.json",
            **obj({"home": {"$ref": "address.json"}}),
        },
        refs,
    )
    with pytest.raises(ValueMismatch):
        rooted.validate({"home": {}})
    with pytest.raises(SchemaError):
        parse(obj({"home": {"$ref": "address.json"}}))


def test_meta_schema_reference_resolves_locally() -> None:
    meta = parse({"$ref": "http://json-schema.org/draft-07/schema#"})
    meta.validate({"type": "string"})
    with pytest.raises(ValueMismatch):
        meta.validate({"type": 12})


# -- canonical and normal forms --------------------------------------------------------------


def test_canonical_is_compact_and_keeps_key_order() -> None:
    text = (
        '{\n  "type": "object",\n  "properties": {"b": {"type": "string"}, "a": {}},\n'
        '  "title": "é"\n}'
    )
    schema = FORMAT.parse(text, {})
    assert (
        schema.canonical()
        == '{"type":"object","properties":{"b":{"type":"string"},"a":{}},"title":"é"}'
    )


def test_normal_form_sorts_what_has_no_order() -> None:
    one = parse(
        {
            "type": "object",
            "required": ["b", "a"],
            "properties": {
                "b": {"enum": [3, 1, 2]},
                "a": {"type": ["string", "null"]},
                "required": {"type": "array", "items": [INT, STR]},
            },
        }
    )
    two = parse(
        {
            "properties": {
                "required": {"items": [INT, STR], "type": "array"},
                "a": {"type": ["null", "string"]},
                "b": {"enum": [1, 2, 3]},
            },
            "required": ["a", "b"],
            "type": "object",
        }
    )
    assert one.canonical() != two.canonical()
    assert one.normalized().canonical() == two.normalized().canonical()
    normal = json.loads(one.normalized().canonical())
    assert normal["required"] == ["a", "b"]
    assert normal["properties"]["b"]["enum"] == [1, 2, 3]
    # a tuple keeps its order, and a property named "required" is a schema, not a list
    assert normal["properties"]["required"]["items"] == [INT, STR]


def test_normal_form_keeps_data_arrays_and_references() -> None:
    schema = parse(
        {"const": [3, 1], "default": {"z": [2, 1]}, "properties": {"x": {"$ref": "t.json"}}},
        {"t.json": STR},
    )
    normal = schema.normalized()
    assert json.loads(normal.canonical())["const"] == [3, 1]
    assert json.loads(normal.canonical())["default"] == {"z": [2, 1]}
    assert normal.references == schema.references
    with pytest.raises(ValueMismatch):
        normal.validate({"x": 1})


# -- values ----------------------------------------------------------------------------------

ORDER = parse(
    {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "email": {"type": "string", "format": "email"},
            "lines": {
                "type": "array",
                "minItems": 1,
                "items": obj({"sku": STR, "qty": INT}, required=["sku", "qty"]),
            },
        },
        "required": ["id", "lines"],
        "additionalProperties": False,
    }
)


def test_validate_accepts_a_good_value() -> None:
    ORDER.validate({"id": 7, "email": "a@example.com", "lines": [{"sku": "x", "qty": 2}]})


@pytest.mark.parametrize(
    ("value", "where", "why"),
    [
        ({"lines": [{"sku": "x", "qty": 1}]}, "$", "'id' is a required property"),
        ({"id": 0, "lines": [{"sku": "x", "qty": 1}]}, "$.id", "minimum"),
        ({"id": 1, "lines": [{"sku": "x", "qty": "2"}]}, "$.lines[0].qty", "not of type 'integer'"),
        ({"id": 1, "lines": []}, "$.lines", "should be non-empty"),
        ({"id": 1, "lines": [{"sku": "x", "qty": 1}], "extra": 1}, "$", "Additional properties"),
        ({"id": 1, "email": "nope", "lines": [{"sku": "x", "qty": 1}]}, "$.email", "email"),
        ({"id": True, "lines": [{"sku": "x", "qty": 1}]}, "$.id", "not of type 'integer'"),
        ("order", "$", "not of type 'object'"),
    ],
)
def test_validate_names_path_and_reason(value: Any, where: str, why: str) -> None:
    with pytest.raises(ValueMismatch) as info:
        ORDER.validate(value)
    message = str(info.value)
    assert message.startswith(f"{where}: ")
    assert why in message


def test_encode_and_decode() -> None:
    value = {"id": 3, "lines": [{"sku": "é", "qty": 1}]}
    payload = ORDER.encode(value)
    assert payload == '{"id":3,"lines":[{"sku":"é","qty":1}]}'.encode()
    assert ORDER.decode(payload) == value
    assert ORDER.decode(payload, check=True) == value
    with pytest.raises(ValueMismatch):
        ORDER.encode({"id": 3})
    with pytest.raises(ValueMismatch):
        parse(True).encode(float("nan"))
    with pytest.raises(ValueMismatch):
        parse(True).encode({1, 2})
    with pytest.raises(ValueMismatch):
        ORDER.decode(b"\xff")
    with pytest.raises(ValueMismatch):
        ORDER.decode(b'{"id": NaN}')
    with pytest.raises(ValueMismatch):
        ORDER.decode(b'{"id": 0, "lines": []}', check=True)


# -- properties ------------------------------------------------------------------------------

_LEAVES = st.sampled_from(
    [
        True,
        False,
        {},
        STR,
        INT,
        NUM,
        {"type": "boolean"},
        {"type": "null"},
        {"type": "string", "maxLength": 3},
        {"type": "integer", "minimum": 0},
        {"enum": ["b", "a", 1]},
        {"const": "k"},
        {"type": ["string", "null"]},
    ]
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "c", "required", "enum"])
    return st.one_of(
        st.builds(
            lambda props, req, extra: {
                "type": "object",
                "properties": props,
                "required": sorted(set(req) & set(props), reverse=True),
                "additionalProperties": extra,
            },
            st.dictionaries(names, children, max_size=3),
            st.lists(names, max_size=3),
            st.one_of(st.booleans(), children),
        ),
        st.builds(lambda items: {"type": "array", "items": items}, children),
        st.builds(
            lambda items: {"type": "array", "items": items, "additionalItems": False},
            st.lists(children, min_size=1, max_size=3),
        ),
        st.builds(lambda subs: {"anyOf": subs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda subs: {"oneOf": subs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda subs: {"allOf": subs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda sub: {"not": sub}, children),
    )


SCHEMAS = st.recursive(_LEAVES, _extend, max_leaves=8)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "a", "b", "abcd", "k"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "required"]), inner, max_size=3)
    ),
    max_leaves=6,
)
PROPERTY_SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _valid(schema: JsonSchema, value: Any) -> bool:
    try:
        schema.validate(value)
    except ValueMismatch:
        return False
    return True


@PROPERTY_SETTINGS
@given(SCHEMAS, st.lists(VALUES, max_size=4))
def test_normal_form_is_idempotent_and_keeps_meaning(raw: Any, values: list[Any]) -> None:
    schema = parse(raw)
    normal = schema.normalized()
    assert normal.normalized().canonical() == normal.canonical()
    for value in values:
        assert _valid(schema, value) == _valid(normal, value)


@PROPERTY_SETTINGS
@given(SCHEMAS)
def test_a_schema_reads_itself_and_its_normal_form(raw: Any) -> None:
    schema = parse(raw)
    assert schema.compatibility_errors(schema) == []
    normal = schema.normalized()
    assert normal.compatibility_errors(schema) == []
    assert schema.compatibility_errors(normal) == []


@PROPERTY_SETTINGS
@given(SCHEMAS, SCHEMAS)
def test_comparison_never_fails_on_valid_schemas(one: Any, two: Any) -> None:
    a, b = parse(one), parse(two)
    for errors in (a.compatibility_errors(b), b.compatibility_errors(a)):
        assert all(e.startswith("{errorType:'") for e in errors)


JSON_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "items",
                    "$ref",
                    "enum",
                    "required",
                    "allOf",
                    "additionalProperties",
                    "$schema",
                    "not",
                    "x",
                ]
            )
            | st.text(max_size=3),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


@PROPERTY_SETTINGS
@given(st.one_of(JSON_JUNK.map(json.dumps), st.text(max_size=30)))
def test_junk_only_ever_raises_schema_error(text: str) -> None:
    try:
        schema = FORMAT.parse(text, {})
    except SchemaError:
        return
    schema.compatibility_errors(schema)
    schema.normalized()
