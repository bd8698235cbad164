"""The PROTOBUF schema format: parsing through protoc (errors, references, well-known
types), the normal form, Confluent's compatibility rules on a table of evolutions and at
the seven levels, value checks, encoding and decoding, and message indexes as
confluent-kafka's serializer writes them."""

from __future__ import annotations

import pytest

from chronik.schemas.compatibility import LEVELS, incompatibilities
from chronik.schemas.protobuf import FORMAT, ProtobufFormat, ProtobufSchema, differences
from chronik.schemas.types import SchemaError, ValueMismatch

P3 = 'syntax = "proto3";\n'
P2 = 'syntax = "proto2";\n'


def parse(text: str, references: dict[str, str] | None = None) -> ProtobufSchema:
    return FORMAT.parse(text, references or {})


def error_types(errors: list[str]) -> set[str]:
    return {e.split("'")[1] for e in errors}


# --------------------------------------------------------------------------- evolutions

# (case, old, new, what breaks when the new schema reads old data (BACKWARD), a compatible
# difference the diff must still see, or None)
EVOLUTIONS: list[tuple[str, str, str, set[str], str | None]] = [
    (
        "field added",
        P3 + "message M { int32 a = 1; }",
        P3 + "message M { int32 a = 1; string b = 2; }",
        set(),
        "FIELD_ADDED",
    ),
    (
        "field removed",
        P3 + "message M { int32 a = 1; string b = 2; }",
        P3 + "message M { int32 a = 1; }",
        set(),
        "FIELD_REMOVED",
    ),
    (
        "field renamed",
        P3 + "message M { int32 a = 1; }",
        P3 + "message M { int32 renamed = 1; }",
        set(),
        "FIELD_NAME_CHANGED",
    ),
    (
        "int32 to int64",
        P3 + "message M { int32 a = 1; }",
        P3 + "message M { int64 a = 1; }",
        set(),
        None,
    ),
    (
        "int32 to uint64",
        P3 + "message M { int32 a = 1; }",
        P3 + "message M { uint64 a = 1; }",
        set(),
        None,
    ),
    (
        "uint32 to bool",
        P3 + "message M { uint32 a = 1; }",
        P3 + "message M { bool a = 1; }",
        set(),
        None,
    ),
    (
        "sint32 to sint64",
        P3 + "message M { sint32 a = 1; }",
        P3 + "message M { sint64 a = 1; }",
        set(),
        None,
    ),
    (
        "fixed32 to sfixed32",
        P3 + "message M { fixed32 a = 1; }",
        P3 + "message M { sfixed32 a = 1; }",
        set(),
        None,
    ),
    (
        "fixed64 to sfixed64",
        P3 + "message M { fixed64 a = 1; }",
        P3 + "message M { sfixed64 a = 1; }",
        set(),
        None,
    ),
    (
        "string to bytes",
        P3 + "message M { string a = 1; }",
        P3 + "message M { bytes a = 1; }",
        set(),
        None,
    ),
    (
        "enum to int32",
        P3 + "message M { E a = 1; } enum E { Z = 0; }",
        P3 + "message M { int32 a = 1; } enum E { Z = 0; }",
        set(),
        None,
    ),
    (
        "int32 to string",
        P3 + "message Order { string id = 1; int32 qty = 2; }",
        P3 + "message Order { string id = 1; string qty = 2; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "int32 to sint32 (zigzag)",
        P3 + "message M { int32 a = 1; }",
        P3 + "message M { sint32 a = 1; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "fixed32 to fixed64",
        P3 + "message M { fixed32 a = 1; }",
        P3 + "message M { fixed64 a = 1; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "float to double",
        P3 + "message M { float a = 1; }",
        P3 + "message M { double a = 1; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "scalar to message",
        P3 + "message M { int32 a = 1; } message N { int32 x = 1; }",
        P3 + "message M { N a = 1; } message N { int32 x = 1; }",
        {"FIELD_KIND_CHANGED"},
        None,
    ),
    (
        "message to map",
        P3 + "message M { N a = 1; } message N { int32 x = 1; }",
        P3 + "message M { map<string, int32> a = 1; } message N { int32 x = 1; }",
        {"FIELD_KIND_CHANGED"},
        None,
    ),
    (
        "map value int32 to string",
        P3 + "message M { map<string, int32> a = 1; }",
        P3 + "message M { map<string, string> a = 1; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "map value int32 to int64",
        P3 + "message M { map<string, int32> a = 1; }",
        P3 + "message M { map<string, int64> a = 1; }",
        set(),
        None,
    ),
    (
        "message field to another message type",
        P3 + "message M { A a = 1; } message A { int32 x = 1; } message B { int32 x = 1; }",
        P3 + "message M { B a = 1; } message A { int32 x = 1; } message B { int32 x = 1; }",
        {"FIELD_NAMED_TYPE_CHANGED"},
        None,
    ),
    (
        "nested message changed under a message field",
        P3 + "message M { Inner i = 1; message Inner { int32 x = 1; } }",
        P3 + "message M { Inner i = 1; message Inner { string x = 1; } }",
        {"FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"},
        None,
    ),
    (
        "type name spelled fully qualified",
        P3 + "package p; message M { Inner i = 1; message Inner { int32 x = 1; } }",
        P3 + "package p; message M { .p.M.Inner i = 1; message Inner { int32 x = 1; } }",
        set(),
        None,
    ),
    (
        "package changed",
        P3 + "package a; message M { int32 x = 1; }",
        P3 + "package b; message M { int32 x = 1; }",
        {"PACKAGE_CHANGED"},
        None,
    ),
    (
        "top-level message removed",
        P3 + "message M { int32 x = 1; } message N { int32 y = 1; }",
        P3 + "message M { int32 x = 1; }",
        {"MESSAGE_REMOVED"},
        None,
    ),
    (
        "nested message removed",
        P3 + "message M { int32 x = 1; message Inner { int32 y = 1; } }",
        P3 + "message M { int32 x = 1; }",
        {"MESSAGE_REMOVED"},
        None,
    ),
    (
        "message added",
        P3 + "message M { int32 x = 1; }",
        P3 + "message M { int32 x = 1; } message N { int32 y = 1; }",
        set(),
        "MESSAGE_ADDED",
    ),
    (
        "messages reordered",
        P3 + "message M { int32 x = 1; } message N { int32 y = 1; }",
        P3 + "message N { int32 y = 1; } message M { int32 x = 1; }",
        set(),
        "MESSAGE_MOVED",
    ),
    (
        "proto2 optional int32 to repeated",
        P2 + "message M { optional int32 a = 1; }",
        P2 + "message M { repeated int32 a = 1; }",
        {"FIELD_NUMERIC_LABEL_CHANGED"},
        None,
    ),
    (
        "proto2 optional enum to repeated",
        P2 + "message M { optional E a = 1; } enum E { Z = 0; }",
        P2 + "message M { repeated E a = 1; } enum E { Z = 0; }",
        {"FIELD_NUMERIC_LABEL_CHANGED"},
        None,
    ),
    (
        "proto3 optional int32 to repeated",
        P3 + "message M { optional int32 a = 1; }",
        P3 + "message M { repeated int32 a = 1; }",
        {"FIELD_NUMERIC_LABEL_CHANGED"},
        None,
    ),
    (
        "proto2 optional string to repeated",
        P2 + "message M { optional string a = 1; }",
        P2 + "message M { repeated string a = 1; }",
        set(),
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    ),
    (
        "proto2 optional int32 made required",
        P2 + "message M { optional int32 a = 1; }",
        P2 + "message M { required int32 a = 1; }",
        {"FIELD_NUMERIC_LABEL_CHANGED"},
        None,
    ),
    (
        "required field added",
        P2 + "message M { optional string a = 1; }",
        P2 + "message M { optional string a = 1; required string b = 2; }",
        {"REQUIRED_FIELD_ADDED"},
        None,
    ),
    (
        "required field removed",
        P2 + "message M { optional string a = 1; required string b = 2; }",
        P2 + "message M { optional string a = 1; }",
        {"REQUIRED_FIELD_REMOVED"},
        None,
    ),
    (
        "oneof member removed",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        P3 + "message M { oneof pay { string card = 1; } }",
        {"ONEOF_FIELD_REMOVED"},
        None,
    ),
    (
        "whole oneof removed",
        P3 + "message M { int32 x = 3; oneof pay { string card = 1; string iban = 2; } }",
        P3 + "message M { int32 x = 3; }",
        set(),
        "ONEOF_REMOVED",
    ),
    (
        "oneof added with new fields",
        P3 + "message M { int32 x = 1; }",
        P3 + "message M { int32 x = 1; oneof pay { string card = 2; string iban = 3; } }",
        set(),
        "ONEOF_FIELD_ADDED",
    ),
    (
        "one existing field moved into a new oneof",
        P3 + "message M { string card = 1; }",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        set(),
        "ONEOF_ADDED",
    ),
    (
        "two existing fields moved into a new oneof",
        P3 + "message M { string card = 1; string iban = 2; }",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        {"MULTIPLE_FIELDS_MOVED_TO_ONEOF"},
        None,
    ),
    (
        "existing field moved into an existing oneof",
        P3 + "message M { string iban = 2; oneof pay { string card = 1; } }",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        {"FIELD_MOVED_TO_EXISTING_ONEOF"},
        None,
    ),
    (
        "oneof member moved to top level",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        P3 + "message M { string card = 1; oneof pay { string iban = 2; } }",
        set(),
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    ),
    (
        "oneof renamed",
        P3 + "message M { oneof pay { string card = 1; string iban = 2; } }",
        P3 + "message M { oneof payment { string card = 1; string iban = 2; } }",
        set(),
        "ONEOF_ADDED",
    ),
    (
        "oneof member changes type",
        P3 + "message M { oneof pay { string card = 1; int32 code = 2; } }",
        P3 + "message M { oneof pay { string card = 1; double code = 2; } }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "enum constant added",
        P3 + "message M { E e = 1; } enum E { A = 0; }",
        P3 + "message M { E e = 1; } enum E { A = 0; B = 1; }",
        set(),
        "ENUM_CONST_ADDED",
    ),
    (
        "enum constant removed",
        P3 + "message M { E e = 1; } enum E { A = 0; B = 1; }",
        P3 + "message M { E e = 1; } enum E { A = 0; }",
        set(),
        "ENUM_CONST_REMOVED",
    ),
    (
        "enum constant renamed",
        P3 + "message M { E e = 1; } enum E { A = 0; B = 1; }",
        P3 + "message M { E e = 1; } enum E { A = 0; C = 1; }",
        set(),
        "ENUM_CONST_CHANGED",
    ),
    (
        "enum removed",
        P3 + "message M { int32 x = 1; } enum E { A = 0; }",
        P3 + "message M { int32 x = 1; }",
        set(),
        "ENUM_REMOVED",
    ),
    (
        "self-referencing message changed",
        P3 + "message Node { int32 v = 1; Node next = 2; }",
        P3 + "message Node { string v = 1; Node next = 2; }",
        {"FIELD_SCALAR_KIND_CHANGED"},
        None,
    ),
    (
        "comments and layout only",
        P3 + "message M {\n  // the id\n  int32 a = 1;\n}\n",
        P3 + "/* v2 */ message   M { int32 a = 1; }",
        set(),
        None,
    ),
    (
        "proto2 to proto3 (not one of Confluent's rules)",
        P2 + "message M { optional int32 a = 1; }",
        P3 + "message M { int32 a = 1; }",
        set(),
        None,
    ),
    (
        "reserved number reused (not one of Confluent's rules)",
        P3 + "message M { int32 a = 1; reserved 2; }",
        P3 + "message M { int32 a = 1; string b = 2; }",
        set(),
        "FIELD_ADDED",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "breaks", "seen"),
    [pytest.param(*case[1:], id=case[0]) for case in EVOLUTIONS],
)
def test_evolution(old: str, new: str, breaks: set[str], seen: str | None) -> None:
    old_schema, new_schema = parse(old), parse(new)
    errors = new_schema.compatibility_errors(old_schema)
    assert error_types(errors) == breaks, errors
    if seen is not None:
        assert seen in {d.type for d in differences(old_schema, new_schema)}


def test_error_message_has_confluents_shape() -> None:
    old = parse(P3 + "message Order { string id = 1; int32 qty = 2; }")
    new = parse(P3 + "message Order { string id = 1; string qty = 2; }")
    assert new.compatibility_errors(old) == [
        "{errorType:'FIELD_SCALAR_KIND_CHANGED', description:'The kind of a SCALAR field at "
        "path '#/Order/2' in the new schema does not match its kind in the old schema', "
        "additionalInfo:'int32 -> string'}"
    ]
    # A FORWARD check reads with the old schema; the caller can say so.
    forward = old.compatibility_errors(new, reader_role="old", writer_role="new")
    assert "in the old schema does not match its kind in the new schema" in forward[0]


def test_paths_name_nested_messages_and_oneofs() -> None:
    old = parse(P3 + "message A { message B { oneof o { int32 x = 1; int32 y = 2; } } }")
    new = parse(P3 + "message A { message B { oneof o { int32 x = 1; } } }")
    assert [(d.type, d.path) for d in differences(old, new) if not d.compatible] == [
        ("ONEOF_FIELD_REMOVED", "#/A/B/o/2")
    ]


def test_stricter_checks_are_opt_in() -> None:
    implicit = parse(P3 + "message M { int32 a = 1; }")
    repeated = parse(P3 + "message M { repeated int32 a = 1; }")
    # Confluent's parser gives proto3 fields without a label none, so it compares none.
    assert repeated.compatibility_errors(implicit) == []
    assert error_types(repeated.compatibility_errors(implicit, strict=True)) == {
        "FIELD_NUMERIC_LABEL_CHANGED"
    }
    reserved = parse(P3 + 'message M { int32 a = 1; reserved 2; reserved "old"; }')
    reuses = parse(P3 + "message M { int32 a = 1; string b = 2; int64 old = 3; }")
    assert error_types(reuses.compatibility_errors(reserved, strict=True)) == {
        "RESERVED_FIELD_REUSED"
    }
    proto2 = parse(P2 + "message M { optional int32 a = 1; }")
    proto3 = parse(P3 + "message M { int32 a = 1; }")
    assert error_types(proto3.compatibility_errors(proto2, strict=True)) == {
        "SYNTAX_VERSION_CHANGED"
    }


def test_referenced_message_changed() -> None:
    v1 = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; }\n'
    v2 = 'syntax = "proto3";\npackage geo;\nmessage Address { int64 city = 1; }\n'
    text = P3 + 'import "other/address.proto";\nmessage Customer { geo.Address home = 1; }\n'
    old = parse(text, {"other/address.proto": v1})
    new = parse(text, {"other/address.proto": v2})
    assert error_types(new.compatibility_errors(old)) == {
        "FIELD_SCALAR_KIND_CHANGED",
        "FIELD_NAMED_TYPE_CHANGED",
    }
    assert new.compatibility_errors(parse(text, {"other/address.proto": v2})) == []


def test_other_schema_type_is_incompatible() -> None:
    class Other:
        schema_type = "AVRO"

    assert parse(P3 + "message M {}").compatibility_errors(Other()) == [  # type: ignore[arg-type]
        "Incompatible because of different schema type"
    ]


# --------------------------------------------------------------------------- levels

V1 = P3 + "message M { int32 a = 1; int32 b = 2; }"
V2_DROPS_B = P3 + "message M { int32 a = 1; }"
V3_REUSES_B = P3 + "message M { int32 a = 1; string b = 2; }"
WITH_N = P3 + "message M { int32 a = 1; int32 b = 2; } message N { int32 c = 1; }"

# level: (adding a field, adding a message, removing one, reusing a dropped number two
# versions on)
LEVEL_OUTCOMES = {
    "NONE": (True, True, True, True),
    "BACKWARD": (True, True, False, True),
    "BACKWARD_TRANSITIVE": (True, True, False, False),
    "FORWARD": (True, False, True, True),
    "FORWARD_TRANSITIVE": (True, False, True, False),
    "FULL": (True, False, False, True),
    "FULL_TRANSITIVE": (True, False, False, False),
}


@pytest.mark.parametrize("level", LEVELS)
def test_levels(level: str) -> None:
    adds_field, adds, removes, reuses = LEVEL_OUTCOMES[level]
    v1 = parse(V1)
    with_c = parse(P3 + "message M { int32 a = 1; int32 b = 2; string c = 3; }")
    assert (incompatibilities(level, with_c, [(1, v1)]) == []) is adds_field
    assert (incompatibilities(level, parse(WITH_N), [(1, v1)]) == []) is adds
    removed = incompatibilities(level, parse(V1), [(1, parse(WITH_N))])
    assert (removed == []) is removes
    history = [(1, v1), (2, parse(V2_DROPS_B))]
    found = incompatibilities(level, parse(V3_REUSES_B), history)
    assert (found == []) is reuses
    if found:
        assert "FIELD_SCALAR_KIND_CHANGED" in found[0]
        assert "{oldSchemaVersion: 1}" in found
        assert found[-1] == f"{{compatibility: '{level}'}}"


def test_every_level_but_none_refuses_something_another_accepts() -> None:
    columns = list(zip(*LEVEL_OUTCOMES.values(), strict=True))
    for level, outcomes in LEVEL_OUTCOMES.items():
        assert any(outcomes), level
        if level != "NONE":
            refused = [i for i, ok in enumerate(outcomes) if not ok]
            assert refused, level
            assert all(any(columns[i]) for i in refused), level


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_text_is_refused(text: str) -> None:
    with pytest.raises(SchemaError, match="empty"):
        parse(text)


def test_junk_is_refused_with_protocs_message() -> None:
    with pytest.raises(SchemaError) as err:
        parse("this is not a proto file")
    message = str(err.value)
    assert message.startswith("schema.proto:1:1: Expected top-level statement")
    assert "chronik-proto-" not in message and "/tmp" not in message


def test_syntax_error_keeps_protocs_message() -> None:
    with pytest.raises(SchemaError, match=r'schema\.proto:2:25: Expected ";"'):
        parse(P3 + "message M { int32 a = 1 }")


def test_unknown_type_is_refused() -> None:
    with pytest.raises(SchemaError, match='"Missing" is not defined'):
        parse(P3 + "message M { Missing a = 1; }")


def test_missing_import_is_refused() -> None:
    with pytest.raises(SchemaError, match="other/address.proto"):
        parse(P3 + 'import "other/address.proto";\nmessage M { int32 a = 1; }')


def test_reference_names_stay_inside_the_parse() -> None:
    with pytest.raises(SchemaError, match="not a relative"):
        parse(P3 + 'import "../x.proto";', {"../x.proto": P3})


def test_references_resolve_imports_transitively() -> None:
    refs = {
        "other/address.proto": P3
        + 'package geo;\nimport "other/country.proto";\n'
        + "message Address { string city = 1; Country country = 2; }\n",
        "other/country.proto": P3 + "package geo;\nmessage Country { string code = 1; }\n",
    }
    schema = parse(
        P3 + 'package crm;\nimport "other/address.proto";\n'
        "message Customer { string name = 1; geo.Address home = 2; }\n",
        refs,
    )
    assert schema.first_message_name() == "crm.Customer"
    value = {"name": "Ada", "home": {"city": "London", "country": {"code": "GB"}}}
    schema.validate(value)
    assert schema.decode(schema.encode(value)) == value


def test_well_known_types_import_without_references() -> None:
    schema = parse(
        P3 + 'import "google/protobuf/timestamp.proto";\n'
        'import "google/protobuf/wrappers.proto";\n'
        'import "google/protobuf/struct.proto";\n'
        "message E { google.protobuf.Timestamp at = 1; google.protobuf.Int64Value n = 2;"
        " google.protobuf.Struct extra = 3; }"
    )
    value = {"at": "2024-05-01T12:00:00Z", "n": "7", "extra": {"k": [1.0, "x"]}}
    schema.validate(value)
    assert schema.decode(schema.encode(value)) == value
    with pytest.raises(ValueMismatch):
        schema.validate({"at": "yesterday"})


def test_same_text_is_parsed_once() -> None:
    fmt = ProtobufFormat(cache_size=1)
    text = P3 + "message M { int32 a = 1; }"
    first = fmt.parse(text, {})
    assert fmt.parse(text, {}) is first
    fmt.parse(P3 + "message N { int32 a = 1; }", {})
    assert fmt.parse(text, {}) is not first


def test_canonical_is_the_text_trimmed() -> None:
    text = P3 + "message M {   int32 a = 1; }\n\n  "
    assert parse(text).canonical() == text.rstrip()


# --------------------------------------------------------------------------- normal form

LAYOUT_A = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
option java_package = "com.shop";
option java_multiple_files = true;

// An order as the shop records it.
message Order {
  string id = 1;
  int32 qty = 2 [deprecated = true, json_name = "quantity"];
  google.protobuf.Timestamp at = 3;
  map<string, Line> lines = 4;
  oneof pay { string card = 5; string iban = 6; }
  optional double price = 7;
  reserved 10 to 12, 20;
  reserved "legacy";
  message Line { string sku = 1; repeated int64 counts = 2 [packed = false]; }
  enum Status { UNKNOWN = 0; OK = 1; }
  Status status = 8;
  google.protobuf.Duration ttl = 9;
}
message Refund { string order_id = 1; }
"""

LAYOUT_B = """syntax = "proto3";
// the same file, reordered and spelled otherwise
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
package shop;
option java_multiple_files = true;
option java_package = "com.shop";
message Order {
  message Line {
    repeated int64 counts = 2 [packed = false];
    string sku = 1;
  }
  .google.protobuf.Duration ttl = 9;
  .shop.Order.Status status = 8;
  reserved "legacy";
  reserved 20, 10 to 12;
  optional double price = 7;
  oneof pay {
    string iban = 6;
    string card = 5;
  }
  map<string, .shop.Order.Line> lines = 4;
  .google.protobuf.Timestamp at = 3;
  int32 qty = 2 [json_name = "quantity", deprecated = true];
  string id = 1;
  enum Status {
    UNKNOWN = 0;
    OK = 1;
  }
}
message Refund {
  string order_id = 1;
}
"""


def test_normal_form_is_one_for_reordered_files() -> None:
    a, b = parse(LAYOUT_A), parse(LAYOUT_B)
    assert a.canonical() != b.canonical()
    assert a.normalized().canonical() == b.normalized().canonical()
    text = a.normalized().canonical()
    assert text.index("string id = 1;") < text.index("int32 qty = 2")
    assert text.index('import "google/protobuf/duration.proto"') < text.index("timestamp")
    # Messages keep their order: the first one is the records' message.
    assert text.index("message Order") < text.index("message Refund")


def test_normal_form_parses_back_to_the_same_descriptor() -> None:
    for text in (LAYOUT_A, LAYOUT_B):
        normal = parse(text).normalized()
        again = normal.normalized()
        assert again.canonical() == normal.canonical()
        assert again.file == normal.file
        assert differences(parse(text), normal) == []
        assert differences(normal, parse(text)) == []


def test_normal_form_keeps_proto2_details() -> None:
    refs = {
        "opts/rules.proto": P2 + 'package rules;\nimport "google/protobuf/descriptor.proto";\n'
        "message Rule { optional int32 min = 1; optional string tag = 2; }\n"
        "extend google.protobuf.FieldOptions { optional Rule rule = 50001; }\n"
    }
    text = (
        P2 + 'package legacy;\nimport "opts/rules.proto";\n'
        "message A {\n"
        '  optional string s = 2 [default = "a\\"b", deprecated = true];\n'
        '  required int32 id = 1 [(rules.rule) = { min: 3 tag: "x" }];\n'
        "  optional E e = 5 [default = Y];\n"
        "  repeated group G = 6 { optional int32 x = 1; }\n"
        "  extensions 100 to max;\n"
        "  enum E { Y = 1; X = 0; }\n"
        "}\n"
        "extend A { optional string note = 100; }\n"
        "service S { rpc Get (A) returns (stream A); }\n"
    )
    schema = parse(text, refs)
    normal = schema.normalized()
    assert normal.normalized().file == normal.file
    assert differences(schema, normal) == differences(normal, schema) == []
    out = normal.canonical()
    assert '[(rules.rule) = { min: 3 tag: "x" }]' in out
    assert '[default = "a\\"b", deprecated = true]' in out
    assert "repeated group G = 6 {" in out
    assert "extensions 100 to max;" in out
    # The first enum value is proto2's default, so it stays first.
    assert out.index("Y = 1;") < out.index("X = 0;")
    assert normal.normalized().canonical() == out


# --------------------------------------------------------------------------- values

ORDER = P3 + (
    "package shop;\n"
    "message Order { string id = 1; int64 qty = 2; repeated string tags = 3;"
    " Status status = 4; map<string, int32> counts = 5;"
    " enum Status { UNKNOWN = 0; PAID = 1; } }\n"
    "message Envelope { message Header { string key = 1; } message Body { bytes data = 1; }"
    " Header header = 1; }\n"
)


def test_validate_accepts_a_fitting_value() -> None:
    parse(ORDER).validate({"id": "o-1", "qty": 3, "tags": ["a"], "status": "PAID"})
    parse(ORDER).validate({})


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"id": 5}, "id"),
        ({"qty": "many"}, "qty"),
        ({"nope": 1}, "nope"),
        ({"status": "LOST"}, "LOST"),
        ({"tags": "a"}, "tags"),
        ([1, 2], "JSON object"),
        (None, "JSON object"),
    ],
)
def test_validate_refuses_a_value_that_does_not_fit(value: object, why: str) -> None:
    with pytest.raises(ValueMismatch, match=why):
        parse(ORDER).validate(value)


def test_encode_decode_round_trip() -> None:
    schema = parse(ORDER)
    value = {"id": "o-1", "qty": "3", "tags": ["a", "b"], "status": "PAID", "counts": {"x": 1}}
    payload = schema.encode(value)
    assert payload == schema.encode({**value, "qty": 3})
    assert schema.decode(payload) == value
    header = {"header": {"key": "k"}}
    assert schema.decode(schema.encode(header, "shop.Envelope"), "shop.Envelope") == header
    with pytest.raises(ValueMismatch):
        schema.decode(b"\xff\xff\xff", "shop.Order")
    with pytest.raises(SchemaError, match="no message"):
        schema.message_class("shop.Missing")


def test_message_name_resolves_nested_indexes() -> None:
    schema = parse(ORDER)
    assert schema.message_name([]) == "shop.Order"
    assert schema.message_name([0]) == "shop.Order"
    assert schema.message_name([1]) == "shop.Envelope"
    assert schema.message_name([1, 0]) == "shop.Envelope.Header"
    assert schema.message_name([1, 1]) == "shop.Envelope.Body"
    assert schema.message_indexes("shop.Envelope.Body") == [1, 1]
    with pytest.raises(SchemaError, match="invalid message indexes"):
        schema.message_name([2])
    # Map entries are no messages of the schema's (protoc generates them), so an index
    # never names one: Order has none nested.
    with pytest.raises(SchemaError):
        schema.message_name([0, 0])


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _unframe(framed: bytes) -> tuple[list[int], bytes]:
    """Confluent's framing: magic 0, a 4-byte schema id, then the message indexes as
    zigzag varints (a count, then each index; a lone 0 for [0]), then the message."""
    assert framed[0] == 0
    pos = 5
    count, pos = _read_varint(framed, pos)
    count = (count >> 1) ^ -(count & 1)
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(framed, pos)
        indexes.append((index >> 1) ^ -(index & 1))
    return indexes or [0], framed[pos:]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("shop.Order", {"id": "o-1", "qty": "3", "tags": ["a"], "status": "PAID"}),
        ("shop.Envelope", {"header": {"key": "k"}}),
        ("shop.Envelope.Body", {"data": "AAE="}),
    ],
)
def test_encoding_matches_confluent_kafkas_serializer(name: str, value: dict) -> None:
    pytest.importorskip("confluent_kafka.schema_registry.protobuf")
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import json_format

    schema = parse(ORDER)
    cls = schema.message_class(name)
    message = json_format.ParseDict(value, cls())
    serializer = ProtobufSerializer(
        cls, MockSchemaRegistryClient({"url": "mock://"}), {"use.deprecated.format": False}
    )
    framed = serializer(message, SerializationContext("orders", MessageField.VALUE))
    indexes, payload = _unframe(framed)
    assert payload == schema.encode(value, name)
    assert schema.message_name(indexes) == name
    assert schema.decode(payload, name) == value


def test_a_base64_file_descriptor_is_taken_as_the_proto_it_describes() -> None:
    """confluent-kafka's Python serializer registers a schema as a base64-encoded
    FileDescriptorProto; it parses to the same messages, kept as .proto text."""
    import base64

    text = 'syntax = "proto3";\npackage acme;\nmessage Order { string id = 1; int64 cents = 2; }\n'
    source = FORMAT.parse(text, {})
    encoded = base64.b64encode(source.file.SerializeToString()).decode()
    parsed = FORMAT.parse(encoded, {})
    assert parsed.first_message_name() == "acme.Order"
    assert "message Order" in parsed.canonical()
    assert parsed.compatibility_errors(source) == []
    assert source.compatibility_errors(parsed) == []
    for junk in ("AAAA", "bm90IGEgZGVzY3JpcHRvcg=="):
        with pytest.raises(SchemaError):
            FORMAT.parse(junk, {})
