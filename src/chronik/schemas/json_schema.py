"""JSON Schema for the registry: parse and check a schema against its draft's meta-schema,
resolve ``$ref`` through the references a subject declares (never over the network), give
its canonical and normal forms, validate values, and tell what breaks when data written
with one schema is read with another.

The compatibility check follows Confluent's ``SchemaDiff`` so that a subject evolves here
as it would on Confluent's registry: both schemas are read into a tree of typed
nodes the way Confluent's loader (everit) types them (a ``type`` array is an ``anyOf``, a
schema with keywords of several kinds is a synthetic ``allOf``, ``$ref`` is followed), the
trees are walked side by side, every difference gets one of Confluent's difference types,
and the incompatible ones (Confluent's STRICT policy, its default) are reported. "original"
in Confluent's diff is the writer here and "update" the reader, and the messages say so.
Paths use draft 7's words (``items/1``, ``additionalItems``, ``dependencies``) whatever the
draft, as Confluent's do.

Difference types covered: ID_CHANGED, TITLE_CHANGED, DESCRIPTION_CHANGED, DEFAULT_CHANGED,
SCHEMA_ADDED, SCHEMA_REMOVED, TYPE_EXTENDED, TYPE_NARROWED, TYPE_CHANGED; MAX_LENGTH_*,
MIN_LENGTH_*, PATTERN_*; MAXIMUM_*, MINIMUM_*, EXCLUSIVE_MAXIMUM_*, EXCLUSIVE_MINIMUM_*,
MULTIPLE_OF_*; REQUIRED_ATTRIBUTE_ADDED / _WITH_DEFAULT_ADDED / _REMOVED, MAX_PROPERTIES_*,
MIN_PROPERTIES_*, ADDITIONAL_PROPERTIES_*, UNEVALUATED_PROPERTIES_*, DEPENDENCY_ARRAY_*,
DEPENDENCY_SCHEMA_* (``dependencies`` and ``dependentRequired``/``dependentSchemas``), every
PROPERTY_..._CONTENT_MODEL type (open, closed and partially open, ``patternProperties``
included); MAX_ITEMS_*, MIN_ITEMS_*, MAX_CONTAINS_*, MIN_CONTAINS_*, UNIQUE_ITEMS_*,
ADDITIONAL_ITEMS_*, UNEVALUATED_ITEMS_*, every ITEM_..._CONTENT_MODEL type (``items`` tuples
and 2020-12 ``prefixItems``); ENUM_ARRAY_EXTENDED / _NARROWED / _CHANGED (``const`` too);
COMBINED_TYPE_EXTENDED / _CHANGED, PRODUCT_TYPE_*, SUM_TYPE_*, COMBINED_TYPE_SUBSCHEMAS_CHANGED
(subschemas matched by a maximum bipartite matching as Confluent does); NOT_TYPE_*.

Not covered: RESERVED_PROPERTY_REMOVED and RESERVED_PROPERTY_CONFLICTS_WITH_PROPERTY (they
read Confluent's schema metadata, which is not part of a schema's text), the deprecated
PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL, and Confluent's ``connect.type: bytes`` exemption. As
in Confluent, ``if``/``then``/``else``, ``contains``, ``propertyNames`` and ``format`` are
not compared. Where Confluent's checker has a slip (EXCLUSIVE_MAXIMUM_DECREASED compared
against ``maximum``; draft 4's boolean ``exclusiveMaximum`` ignored) the intended rule is
applied instead. One type is ours: COMPARISON_TOO_COMPLEX, when a comparison outgrows its
step budget, which is never counted compatible.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any
from urllib.parse import urldefrag, urljoin

import jsonschema
import jsonschema.exceptions
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _META_SCHEMAS

from .types import ParsedSchema, SchemaError, ValueMismatch

# Deeper schemas are refused: the meta-schema check, the validator and the comparison all
# recurse, and a schema this deep is an attack or a mistake, not a data model.
MAX_DEPTH = 200
# Recursive schemas can make the comparison branch a lot; past this many steps it stops
# and reports the pair as not shown compatible rather than pinning a CPU.
MAX_COMPARE_STEPS = 200_000
_MAX_COMPARE_DEPTH = 400
_MAX_MESSAGE = 500
_RECURSION_LIMIT = 6000


@dataclass(frozen=True)
class _Dialect:
    order: int
    validator: type[Any]
    spec: referencing.Specification[Any]


_DRAFT4 = _Dialect(4, jsonschema.Draft4Validator, referencing.jsonschema.DRAFT4)
_DRAFT6 = _Dialect(6, jsonschema.Draft6Validator, referencing.jsonschema.DRAFT6)
_DRAFT7 = _Dialect(7, jsonschema.Draft7Validator, referencing.jsonschema.DRAFT7)
_DRAFT201909 = _Dialect(2019, jsonschema.Draft201909Validator, referencing.jsonschema.DRAFT201909)
_DRAFT202012 = _Dialect(2020, jsonschema.Draft202012Validator, referencing.jsonschema.DRAFT202012)
_DIALECTS = {
    "json-schema.org/draft-04/schema": _DRAFT4,
    "json-schema.org/draft-06/schema": _DRAFT6,
    "json-schema.org/draft-07/schema": _DRAFT7,
    "json-schema.org/draft/2019-09/schema": _DRAFT201909,
    "json-schema.org/draft/2020-12/schema": _DRAFT202012,
}
# Confluent reads a schema without ``$schema`` as draft 7.
_DEFAULT_DIALECT = _DRAFT7


def _dialect_of(contents: Any, default: _Dialect) -> _Dialect:
    """The draft a schema document declares; SchemaError for one we do not know."""
    if not isinstance(contents, dict) or "$schema" not in contents:
        return default
    uri = contents["$schema"]
    if not isinstance(uri, str):
        raise SchemaError("'$schema' must be a string")
    key = uri.strip().rstrip("#")
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    dialect = _DIALECTS.get(key)
    if dialect is None:
        raise SchemaError(
            f"unknown '$schema' {uri!r}: draft-04, draft-06, draft-07, 2019-09 and 2020-12 "
            "are supported"
        )
    return dialect


# -- parsing -------------------------------------------------------------------------------


def _recursion_room() -> None:
    """The meta-schema check, the validator and the comparison recurse a few frames per
    level of a schema; a schema at MAX_DEPTH needs more than Python's default 1000 frames.
    Python 3.11 calls between Python functions barely touch the C stack, so the limit is
    raised (never lowered) rather than refusing schemas shallower than MAX_DEPTH."""
    if sys.getrecursionlimit() < _RECURSION_LIMIT:
        sys.setrecursionlimit(_RECURSION_LIMIT)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load_json(text: Any, what: str) -> Any:
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError(f"{what} is not UTF-8: {e}") from None
    if not isinstance(text, str):
        raise SchemaError(f"{what} must be a string of JSON, not {type(text).__name__}")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise SchemaError(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise SchemaError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, dict | bool):
        raise SchemaError(f"{what} must be a JSON object or boolean, not {type(value).__name__}")
    _check_depth(value, what)
    return value


def _check_depth(value: Any, what: str) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError(f"{what} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _check_meta(contents: Any, dialect: _Dialect, what: str) -> None:
    try:
        dialect.validator.check_schema(contents)
    except jsonschema.exceptions.SchemaError as e:
        # check_schema already raised the best match among the meta-schema's errors.
        raise SchemaError(
            f"{what} is not a valid JSON Schema (draft {dialect.order}): at {e.json_path}: "
            f"{_short(e.message)}"
        ) from None


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _check_refs(resolver: referencing.Resolver[Any], contents: Any, dialect: _Dialect) -> None:
    """Every ``$ref`` in a document must resolve inside the registry built from the schema
    and its references: nothing is fetched, so a ref nothing declares is an error now
    rather than a failure on the first value."""
    stack = [(resolver, dialect.spec.create_resource(contents))]
    while stack:
        res, resource = stack.pop()
        res = res.in_subresource(resource)
        node = resource.contents
        if isinstance(node, dict):
            for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
                ref = node.get(keyword)
                if not isinstance(ref, str):
                    continue
                try:
                    res.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    raise SchemaError(
                        f"'{keyword}' {ref!r} does not resolve: not in this schema nor in its "
                        "references (external schemas are never fetched)"
                    ) from None
        stack.extend((res, sub) for sub in resource.subresources())


class JsonSchemaFormat:
    """The JSON Schema format: ``parse`` turns a schema's text and its resolved references
    into a JsonSchema."""

    schema_type = "JSON"

    def parse(self, text: str, references: Mapping[str, str] | None = None) -> JsonSchema:
        _recursion_room()
        try:
            return self._parse(text, references or {})
        except SchemaError:
            raise
        except RecursionError:
            raise SchemaError(f"schema is nested deeper than {MAX_DEPTH} levels") from None
        except Exception as e:  # noqa: BLE001 - junk input must only ever be a SchemaError
            raise SchemaError(f"invalid JSON Schema: {type(e).__name__}: {e}") from None

    def _parse(self, text: str, references: Mapping[str, str]) -> JsonSchema:
        raw = _load_json(text, "schema")
        dialect = _dialect_of(raw, _DEFAULT_DIALECT)
        _check_meta(raw, dialect, "schema")
        root = dialect.spec.create_resource(raw)
        base = root.id() or ""
        registry: referencing.Registry[Any] = _META_SCHEMAS
        docs: list[tuple[str, Any, _Dialect]] = []
        for name, ref_text in references.items():
            if not isinstance(name, str):
                raise SchemaError("a reference's name must be a string")
            ref_raw = _load_json(ref_text, f"reference {name!r}")
            ref_dialect = _dialect_of(ref_raw, _DEFAULT_DIALECT)
            _check_meta(ref_raw, ref_dialect, f"reference {name!r}")
            resource = ref_dialect.spec.create_resource(ref_raw)
            uris = {name, urljoin(base, name)} if base else {name}
            registry = registry.with_resources((uri, resource) for uri in uris)
            docs.append((name, ref_raw, ref_dialect))
        registry = registry.with_resource(base, root).crawl()
        resolver = registry.resolver_with_root(root)
        _check_refs(resolver, raw, dialect)
        for name, ref_raw, ref_dialect in docs:
            _check_refs(registry.resolver(base_uri=name), ref_raw, ref_dialect)
        return JsonSchema(raw, dict(references), dialect, registry, resolver)


FORMAT = JsonSchemaFormat()


# -- the parsed schema ---------------------------------------------------------------------


class JsonSchema:
    """A parsed JSON Schema with the references it was parsed with."""

    schema_type = "JSON"

    def __init__(
        self,
        raw: Any,
        references: dict[str, str],
        dialect: _Dialect,
        registry: referencing.Registry[Any],
        resolver: referencing.Resolver[Any],
    ) -> None:
        self.raw = raw
        self.references = references
        self._dialect = dialect
        self._resolver = resolver
        # Built once: a schema validates every value of its subject.
        self._validator = dialect.validator(
            raw, registry=registry, format_checker=dialect.validator.FORMAT_CHECKER
        )
        self._tree: _Node | None = None

    def __repr__(self) -> str:
        return f"JsonSchema({_short(self.canonical())})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JsonSchema):
            return NotImplemented
        return self.canonical() == other.canonical() and self.references == other.references

    def __hash__(self) -> int:
        return hash(self.canonical())

    def canonical(self) -> str:
        return json.dumps(self.raw, separators=(",", ":"), ensure_ascii=False)

    def normalized(self) -> JsonSchema:
        return FORMAT.parse(
            json.dumps(_normalize_schema(self.raw), separators=(",", ":"), ensure_ascii=False),
            self.references,
        )

    def validate(self, value: Any) -> None:
        _recursion_room()
        try:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        except RecursionError:
            raise ValueMismatch("$: value is nested too deeply to validate") from None
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueMismatch(f"$: not a JSON value: {type(e).__name__}: {e}") from None
        except referencing.exceptions.Unresolvable as e:
            # Parsing resolves every reference; a dynamic one can still miss at run time.
            raise ValueMismatch(f"$: the schema's reference does not resolve: {e}") from None
        if error is not None:
            raise ValueMismatch(f"{error.json_path}: {_short(error.message)}")

    def encode(self, value: Any) -> bytes:
        """The value as UTF-8 compact JSON, once it fits the schema."""
        self.validate(value)
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueMismatch(f"$: not a JSON value: {e}") from None
        return text.encode("utf-8")

    def decode(self, payload: bytes, *, check: bool = False) -> Any:
        """The value a payload holds; with ``check`` it must also fit the schema."""
        try:
            value = json.loads(bytes(payload).decode("utf-8"), parse_constant=_reject_constant)
        except RecursionError:
            raise ValueMismatch("$: payload is nested too deeply") from None
        except (TypeError, ValueError) as e:
            raise ValueMismatch(f"$: payload is not UTF-8 JSON: {e}") from None
        if check:
            self.validate(value)
        return value

    def _root(self) -> _Node:
        if self._tree is None:
            self._tree = _Loader().load(self.raw, self._resolver, self._dialect)
        return self._tree

    def differences(self, writer: JsonSchema) -> list[Difference]:
        """Every difference Confluent's diff finds from ``writer`` (its original) to this
        schema (its update), compatible ones included."""
        return _diff(writer._root(), self._root())

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            kind = getattr(writer, "schema_type", type(writer).__name__)
            return [
                "{errorType:'TYPE_CHANGED', description:'Incompatible because of different "
                f"schema type', additionalInfo:'reader JSON, writer {kind}'}}"
            ]
        return [d.message() for d in self.differences(writer) if not d.compatible]


# -- normal form ---------------------------------------------------------------------------

_SCHEMA_KEYWORDS = frozenset(
    {
        "additionalProperties",
        "additionalItems",
        "items",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contentSchema",
    }
)
_SCHEMA_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "definitions", "$defs", "dependentSchemas"}
)
_SCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})


def _data_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sorted_data(values: list[Any]) -> list[Any]:
    unique = {_data_key(v): v for v in values}
    return [_sorted_keys(unique[k]) for k in sorted(unique)]


def _sorted_keys(value: Any) -> Any:
    """Data (``const``, ``default``, ``enum`` members...): object keys sorted, arrays kept
    in order, since array order is part of a JSON value."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def _normalize_schema(node: Any) -> Any:
    """Keys sorted everywhere; sets written as arrays (``required``, ``enum``, a ``type``
    list, property dependencies) sorted and deduplicated. Arrays of subschemas keep their
    order: ``items`` tuples mean it, and a ``$ref`` may point into ``allOf/1``."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key in sorted(node):
        value = node[key]
        if key in _SCHEMA_KEYWORDS:
            if isinstance(value, list):
                value = [_normalize_schema(v) for v in value]
            else:
                value = _normalize_schema(value)
        elif key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            value = {k: _normalize_schema(value[k]) for k in sorted(value)}
        elif key in _SCHEMA_LIST_KEYWORDS and isinstance(value, list):
            value = [_normalize_schema(v) for v in value]
        elif key in ("required", "enum", "type") and isinstance(value, list):
            value = _sorted_data(value)
        elif key in ("dependencies", "dependentRequired") and isinstance(value, dict):
            value = {
                k: _sorted_data(v) if isinstance(v, list) else _normalize_schema(v)
                for k, v in sorted(value.items())
            }
        else:
            value = _sorted_keys(value)
        out[key] = value
    return out


# -- the typed tree the comparison walks ---------------------------------------------------

_OBJECT_KEYWORDS = (
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
)
_ARRAY_KEYWORDS = (
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
)
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "id",
        "$comment",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$vocabulary",
        "title",
        "description",
        "default",
        "examples",
        "definitions",
        "$defs",
        "readOnly",
        "writeOnly",
        "deprecated",
    }
)
_TYPE_KINDS = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "object": "object",
    "array": "array",
    "boolean": "boolean",
    "null": "null",
}


@dataclass(eq=False)
class _Node:
    """One schema as Confluent's loader types it: ``kind`` is empty, false, string, number,
    boolean, null, object, array, enum, const, combined, not, conditional or ref."""

    kind: str
    raw: Any = None
    dialect: _Dialect = _DEFAULT_DIALECT
    # combined
    criterion: str = ""
    subschemas: list[_Node] = field(default_factory=list)
    # not / single items / additional* / unevaluated*
    child: _Node | None = None
    # number
    integer: bool = False
    # object
    properties: dict[str, _Node] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    pattern_properties: list[tuple[str, _Node]] = field(default_factory=list)
    additional: bool | _Node = True
    unevaluated: _Node | None = None
    dep_arrays: dict[str, frozenset[str]] = field(default_factory=dict)
    dep_schemas: dict[str, _Node] = field(default_factory=dict)
    # array
    all_items: _Node | None = None
    item_list: list[_Node] | None = None
    # ref
    target: Any = None
    # A part of a synthetic allOf or of a type list: the annotations belong to the whole.
    part: bool = False

    def annotation(self, key: str) -> Any:
        if self.part or not isinstance(self.raw, dict):
            return None
        if key == "$id" and self.dialect.order == 4:
            return self.raw.get("id")
        return self.raw.get(key)

    def has_default(self) -> bool:
        node = _deref(self)
        return isinstance(node.raw, dict) and "default" in node.raw


def _deref(node: _Node) -> _Node:
    seen: set[int] = set()
    while node.kind == "ref":
        if id(node) in seen:
            return _Node("empty")
        seen.add(id(node))
        node = node.target()
    return node


class _Loader:
    """Reads raw schemas into nodes; ``$ref`` targets load on first use, so a recursive
    schema is a finite graph of nodes."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, int], _Node] = {}
        # The cache is keyed by id(): the raw schemas must outlive it.
        self._keep: list[Any] = []

    def load(self, raw: Any, resolver: referencing.Resolver[Any], dialect: _Dialect) -> _Node:
        if raw is True:
            return _Node("empty", raw, dialect)
        if raw is False:
            return _Node("false", raw, dialect)
        if not isinstance(raw, dict):
            return _Node("empty", raw, dialect)
        key = (id(raw), dialect.order)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        self._keep.append(raw)
        resolver = resolver.in_subresource(dialect.spec.create_resource(raw))
        node = self._build(raw, resolver, dialect)
        self._cache[key] = node
        return node

    def _ref(
        self, ref: str, raw: Any, resolver: referencing.Resolver[Any], dialect: _Dialect
    ) -> _Node:
        done: list[_Node] = []

        def target() -> _Node:
            if not done:
                try:
                    resolved = resolver.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    done.append(_Node("empty"))
                    return done[0]
                try:
                    doc = resolver.lookup(urldefrag(ref).url).contents
                    target_dialect = _dialect_of(doc, _DEFAULT_DIALECT)
                except (referencing.exceptions.Unresolvable, SchemaError):
                    target_dialect = dialect
                done.append(self.load(resolved.contents, resolved.resolver, target_dialect))
            return done[0]

        return _Node("ref", raw, dialect, target=target)

    def _build(
        self, raw: dict[str, Any], resolver: referencing.Resolver[Any], d: _Dialect
    ) -> _Node:
        ref = raw.get("$ref")
        if ref is None and d.order >= 2019:
            ref = raw.get("$dynamicRef", raw.get("$recursiveRef"))
        parts: list[_Node] = []
        if isinstance(ref, str):
            ref_node = self._ref(ref, raw, resolver, d)
            rest = {k for k in raw if k not in _ANNOTATIONS} - {
                "$ref",
                "$dynamicRef",
                "$recursiveRef",
            }
            # Up to draft 7 a $ref's siblings are ignored; later drafts apply them too.
            if d.order <= 7 or not rest:
                return ref_node
            parts.append(ref_node)
        if isinstance(raw.get("enum"), list):
            parts.append(_Node("enum", raw, d))
        for criterion in ("allOf", "anyOf", "oneOf"):
            subs = raw.get(criterion)
            if isinstance(subs, list):
                nodes = [self.load(s, resolver, d) for s in subs]
                parts.append(_Node("combined", raw, d, criterion=criterion, subschemas=nodes))
        if "not" in raw:
            parts.append(_Node("not", raw, d, child=self.load(raw["not"], resolver, d)))
        if "const" in raw:
            parts.append(_Node("const", raw, d))
        declared = raw.get("type")
        if isinstance(declared, str):
            parts.append(self._typed(declared, raw, resolver, d))
        elif isinstance(declared, list):
            typed = [self._typed(t, raw, resolver, d) for t in declared if isinstance(t, str)]
            for node in typed:
                node.part = True
            parts.append(_Node("combined", raw, d, criterion="anyOf", subschemas=typed))
        else:
            for kind, keywords in (
                ("object", _OBJECT_KEYWORDS),
                ("array", _ARRAY_KEYWORDS),
                ("number", _NUMBER_KEYWORDS),
                ("string", _STRING_KEYWORDS),
            ):
                if any(k in raw for k in keywords):
                    parts.append(self._typed(kind, raw, resolver, d))
        if "if" in raw:
            parts.append(_Node("conditional", raw, d))
        if not parts:
            return _Node("empty", raw, d)
        if len(parts) == 1:
            return parts[0]
        for node in parts:
            node.part = True
        return _Node("combined", raw, d, criterion="allOf", subschemas=parts)

    def _typed(
        self, name: str, raw: dict[str, Any], resolver: referencing.Resolver[Any], d: _Dialect
    ) -> _Node:
        kind = _TYPE_KINDS.get(name, "empty")
        node = _Node(kind, raw, d, integer=name == "integer")
        if kind == "object":
            self._object(node, raw, resolver, d)
        elif kind == "array":
            self._array(node, raw, resolver, d)
        return node

    def _object(self, node: _Node, raw: dict[str, Any], resolver: Any, d: _Dialect) -> None:
        props = raw.get("properties")
        if isinstance(props, dict):
            node.properties = {k: self.load(v, resolver, d) for k, v in props.items()}
        required = raw.get("required")
        if isinstance(required, list):
            node.required = frozenset(r for r in required if isinstance(r, str))
        patterns = raw.get("patternProperties")
        if isinstance(patterns, dict):
            node.pattern_properties = [(p, self.load(s, resolver, d)) for p, s in patterns.items()]
        additional = raw.get("additionalProperties", True)
        node.additional = (
            additional if isinstance(additional, bool) else self.load(additional, resolver, d)
        )
        if "unevaluatedProperties" in raw:
            node.unevaluated = self.load(raw["unevaluatedProperties"], resolver, d)
        deps = raw.get("dependencies")
        if not isinstance(deps, dict):
            deps = {}
            dep_required = raw.get("dependentRequired")
            dep_schemas = raw.get("dependentSchemas")
            if isinstance(dep_required, dict):
                deps.update(dep_required)
            if isinstance(dep_schemas, dict):
                deps.update(dep_schemas)
        for name, dep in deps.items():
            if isinstance(dep, list):
                node.dep_arrays[name] = frozenset(x for x in dep if isinstance(x, str))
            else:
                node.dep_schemas[name] = self.load(dep, resolver, d)

    def _array(self, node: _Node, raw: dict[str, Any], resolver: Any, d: _Dialect) -> None:
        items = raw.get("items")
        if d.order >= 2020:
            prefix = raw.get("prefixItems")
            if isinstance(prefix, list):
                node.item_list = [self.load(s, resolver, d) for s in prefix]
                tail = items if items is not None else True
            elif isinstance(items, bool):
                # Confluent reads a boolean 2020-12 "items" as draft 7's additionalItems.
                tail = items
            else:
                if items is not None:
                    node.all_items = self.load(items, resolver, d)
                tail = True
        else:
            if isinstance(items, list):
                node.item_list = [self.load(s, resolver, d) for s in items]
            elif items is not None:
                node.all_items = self.load(items, resolver, d)
            tail = raw.get("additionalItems", True)
        node.additional = tail if isinstance(tail, bool) else self.load(tail, resolver, d)
        if "unevaluatedItems" in raw:
            node.unevaluated = self.load(raw["unevaluatedItems"], resolver, d)


# -- differences ---------------------------------------------------------------------------


def _types(names: str) -> frozenset[str]:
    return frozenset(names.split())


COMPATIBLE_STRICT = _types(
    """
    ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
    MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED
    PATTERN_REMOVED MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED
    EXCLUSIVE_MAXIMUM_INCREASED EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED
    EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED MULTIPLE_OF_REMOVED
    REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
    DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED
    MAX_PROPERTIES_REMOVED MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED
    ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED UNEVALUATED_PROPERTIES_ADDED
    UNEVALUATED_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
    REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
    PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
    PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
    PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL MAX_ITEMS_INCREASED
    MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED
    MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED
    ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED UNEVALUATED_ITEMS_ADDED
    UNEVALUATED_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
    ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
    ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ENUM_ARRAY_EXTENDED
    COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
    """
)
"""Confluent's STRICT policy, its default: the difference types that keep data readable."""

COMPATIBLE_LENIENT = COMPATIBLE_STRICT | _types(
    """
    ADDITIONAL_PROPERTIES_NARROWED ADDITIONAL_PROPERTIES_REMOVED UNEVALUATED_PROPERTIES_NARROWED
    UNEVALUATED_PROPERTIES_REMOVED REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL
    PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    """
)
"""Confluent's LENIENT policy: STRICT plus changes that hold for the usual open models."""

# Not a Confluent type: a comparison that ran out of budget is not shown compatible.
_TOO_COMPLEX = "COMPARISON_TOO_COMPLEX"

_KEYWORD_ADDED_OR_REMOVED = _types(
    """
    MAXIMUM_ADDED MINIMUM_ADDED EXCLUSIVE_MAXIMUM_ADDED EXCLUSIVE_MINIMUM_ADDED
    MULTIPLE_OF_ADDED MAX_LENGTH_ADDED MIN_LENGTH_ADDED PATTERN_ADDED REQUIRED_ATTRIBUTE_ADDED
    MAX_PROPERTIES_ADDED MIN_PROPERTIES_ADDED DEPENDENCY_ARRAY_ADDED DEPENDENCY_SCHEMA_ADDED
    MAX_ITEMS_ADDED MIN_ITEMS_ADDED MAX_CONTAINS_ADDED MIN_CONTAINS_ADDED UNIQUE_ITEMS_ADDED
    ADDITIONAL_ITEMS_REMOVED ADDITIONAL_PROPERTIES_REMOVED UNEVALUATED_PROPERTIES_REMOVED
    UNEVALUATED_ITEMS_REMOVED
    """
)
_VALUE_INCREASED = _types(
    """
    MIN_LENGTH_INCREASED MINIMUM_INCREASED EXCLUSIVE_MINIMUM_INCREASED MIN_PROPERTIES_INCREASED
    MULTIPLE_OF_EXPANDED MIN_ITEMS_INCREASED MIN_CONTAINS_INCREASED
    """
)
_VALUE_DECREASED = _types(
    """
    MAX_LENGTH_DECREASED MAXIMUM_DECREASED MAX_ITEMS_DECREASED MAX_CONTAINS_DECREASED
    EXCLUSIVE_MAXIMUM_DECREASED MAX_PROPERTIES_DECREASED
    """
)
_TYPE_NARROWED = _types(
    """
    ADDITIONAL_ITEMS_NARROWED ENUM_ARRAY_NARROWED SUM_TYPE_NARROWED
    ADDITIONAL_PROPERTIES_NARROWED UNEVALUATED_PROPERTIES_NARROWED UNEVALUATED_ITEMS_NARROWED
    """
)
_VALUE_CHANGED = frozenset({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"})
_TYPE_CHANGED = _types(
    """
    TYPE_CHANGED TYPE_NARROWED COMBINED_TYPE_CHANGED COMBINED_TYPE_SUBSCHEMAS_CHANGED
    ENUM_ARRAY_CHANGED
    """
)
_TYPE_EXTENDED = frozenset(
    {"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"}
)
_ADDED_TO_OPEN = _types(
    """
    REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL
    REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_OPEN_CONTENT_MODEL
    """
)


@dataclass(frozen=True)
class Difference:
    """One of Confluent's differences: its type, the JSON pointer (``#/...``) in the
    schemas where it is, and what the two schemas say there."""

    type: str
    path: str
    info: str = ""

    @property
    def compatible(self) -> bool:
        return self.type in COMPATIBLE_STRICT

    def description(self) -> str:
        """Confluent's wording; its "update" schema is the reader, "original" the writer."""
        t, p = self.type, self.path
        if t in _KEYWORD_ADDED_OR_REMOVED:
            return (
                f"The keyword at path '{p}' in the reader schema is not present in the "
                "writer schema"
            )
        if t in _VALUE_INCREASED:
            return (
                f"The value at path '{p}' in the reader schema is more than its value in the "
                "writer schema"
            )
        if t in _VALUE_DECREASED:
            return (
                f"The value at path '{p}' in the reader schema is less than its value in the "
                "writer schema"
            )
        if t in _VALUE_CHANGED:
            return f"The value at path '{p}' is different between the reader and writer schema"
        if t in _TYPE_NARROWED:
            return (
                f"An array or combined type at path '{p}' has fewer elements in the reader "
                "schema than the writer schema"
            )
        if t in _TYPE_EXTENDED:
            return (
                f"An array or combined type at path '{p}' has more elements in the reader "
                "schema than the writer schema"
            )
        if t in _TYPE_CHANGED:
            return (
                f"A type at path '{p}' is different between the reader schema and the writer schema"
            )
        if t in _ADDED_TO_OPEN:
            return (
                "The reader schema has an open content model and has a property or item at "
                f"path '{p}' which is missing in the writer schema"
            )
        if t == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
            return (
                "The reader schema has an unopen content model and has a required property at "
                f"path '{p}' which is missing in the writer schema"
            )
        if t in (
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
            "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        ):
            return (
                "The reader has a closed content model and is missing a property or item "
                f"present at path '{p}' in the writer schema"
            )
        if t in (
            "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        ):
            return (
                "A property or item is missing in the reader schema but present at path "
                f"'{p}' in the writer schema and is not covered by its partially open "
                "content model"
            )
        if t in (
            "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        ):
            return (
                f"The reader schema has a property or item at path '{p}' which is missing in "
                "the writer schema and is not covered by its partially open content model"
            )
        if t == "SCHEMA_ADDED":
            return f"The reader schema has a schema at path '{p}' which the writer schema lacks"
        if t == _TOO_COMPLEX:
            return f"The schemas at path '{p}' are too complex to compare"
        return f"The schemas differ at path '{p}'"

    def message(self) -> str:
        info = self.info or f"path: {self.path}"
        return (
            f"{{errorType:'{self.type}', description:'{self.description()}', "
            f"additionalInfo:'{_short(info)}'}}"
        )


class _Budget(Exception):
    pass


class _Ctx:
    def __init__(self, seed: dict[tuple[int, int], tuple[Difference, ...]]) -> None:
        self.memo: dict[tuple[int, int], tuple[Difference, ...]] = {}
        self.in_progress: set[tuple[int, int]] = set()
        self.seed = seed
        self.assumed = False
        self.steps = 0
        self.depth = 0


def _diff(original: _Node, update: _Node) -> list[Difference]:
    """Every pair of nodes is compared once per pass and cached, which keeps recursive
    schemas whose definitions refer to one another polynomial. A pair met again while it
    is still being compared is a cycle through ``$ref`` and is assumed to read; since a
    cached result may rest on that assumption, passes repeat, each seeded with the pairs
    the previous one found incompatible, until the incompatible pairs stop changing."""
    _recursion_room()
    seed: dict[tuple[int, int], tuple[Difference, ...]] = {}
    steps = 0
    try:
        while True:
            ctx = _Ctx(seed)
            result = _compare(ctx, original, update, "")
            steps += ctx.steps
            if steps > MAX_COMPARE_STEPS:
                raise _Budget
            incompatible = {k: v for k, v in ctx.memo.items() if not _compatible(v)}
            if not ctx.assumed or incompatible.keys() == seed.keys():
                return list(result)
            seed = incompatible
    except (_Budget, RecursionError):
        return [Difference(_TOO_COMPLEX, "#/", "comparison stopped before it could finish")]


def _join(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if prefix else path


def _render(path: str) -> str:
    return "#/" + path


def _compatible(diffs: tuple[Difference, ...] | list[Difference]) -> bool:
    return all(d.compatible for d in diffs)


def _compare(
    ctx: _Ctx, original: _Node | None, update: _Node | None, at: str
) -> tuple[Difference, ...]:
    """Differences from ``original`` to ``update`` found at relative path ``at``."""
    if original is None and update is None:
        return ()
    if original is None:
        return (Difference("SCHEMA_ADDED", _render(at)),)
    if update is None:
        return (Difference("SCHEMA_REMOVED", _render(at)),)
    original, update = _deref(original), _deref(update)
    ctx.steps += 1
    if ctx.steps > MAX_COMPARE_STEPS or ctx.depth > _MAX_COMPARE_DEPTH:
        raise _Budget
    key = (id(original), id(update))
    cached = ctx.memo.get(key)
    if cached is None:
        if key in ctx.in_progress:
            cached = ctx.seed.get(key)
            if cached is None:
                ctx.assumed = True
                return ()
        else:
            ctx.in_progress.add(key)
            ctx.depth += 1
            try:
                out: list[Difference] = []
                _compare_types(ctx, original, update, out)
                cached = tuple(out)
            finally:
                ctx.depth -= 1
                ctx.in_progress.discard(key)
            ctx.memo[key] = cached
    if not at:
        return cached
    return tuple(Difference(d.type, _rebase(at, d.path), d.info) for d in cached)


def _rebase(at: str, path: str) -> str:
    rel = path[2:]
    return _render(_join(at, rel) if rel else at)


class _Out:
    """Collects differences at paths relative to the pair being compared."""

    def __init__(self, out: list[Difference]) -> None:
        self.out = out

    def add(self, type_: str, at: str = "", info: str = "") -> None:
        self.out.append(Difference(type_, _render(at), info))

    def sub(self, ctx: _Ctx, original: _Node | None, update: _Node | None, at: str) -> None:
        self.out.extend(_compare(ctx, original, update, at))


def _describe(node: _Node) -> str:
    if node.kind == "number" and node.integer:
        return "integer"
    if node.kind == "combined":
        return node.criterion
    return node.kind


def _compare_types(ctx: _Ctx, original: _Node, update: _Node, out_list: list[Difference]) -> None:
    out = _Out(out_list)
    if original.kind != "combined" and update.kind == "combined":
        subs = update.subschemas
        if len(subs) == 1:
            diffs = _compare(ctx, original, subs[0], "")
            if _compatible(diffs):
                out.out.extend(diffs)
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for sub in subs:
                diffs = _compare(ctx, original, sub, "")
                if _compatible(diffs):
                    out.out.extend(diffs)
                    out.add("SUM_TYPE_EXTENDED")
                    return
    elif original.kind == "combined" and update.kind != "combined":
        subs = original.subschemas
        if len(subs) == 1:
            diffs = _compare(ctx, subs[0], update, "")
            if _compatible(diffs):
                out.out.extend(diffs)
                return
        elif original.criterion == "allOf":
            for sub in subs:
                diffs = _compare(ctx, sub, update, "")
                if _compatible(diffs):
                    out.out.extend(diffs)
                    out.add("PRODUCT_TYPE_NARROWED")
                    return

    if original.kind != update.kind:
        # Data no schema accepts reads anywhere; a schema accepting anything reads all.
        if original.kind == "false" or update.kind == "empty":
            return
        out.add(
            "TYPE_CHANGED",
            info=f"reader type: {_describe(update)}, writer type: {_describe(original)}",
        )
        return

    for key, type_ in (
        ("$id", "ID_CHANGED"),
        ("title", "TITLE_CHANGED"),
        ("description", "DESCRIPTION_CHANGED"),
        ("default", "DEFAULT_CHANGED"),
    ):
        if not _same_value(original.annotation(key), update.annotation(key)):
            out.add(type_)

    kind = original.kind
    if kind == "string":
        _compare_string(original.raw, update.raw, out)
    elif kind == "number":
        _compare_number(original, update, out)
    elif kind == "const":
        if not _same_value(original.raw.get("const"), update.raw.get("const")):
            out.add("ENUM_ARRAY_CHANGED", "const", _values_info(original, update, "const"))
    elif kind == "enum":
        _compare_enum(original, update, out)
    elif kind == "combined":
        _compare_combined(ctx, original, update, out)
    elif kind == "not":
        # A wider "not" admits less: compare the negated schemas the other way round.
        diffs = _compare(ctx, update.child, original.child, "")
        out.add("NOT_TYPE_NARROWED" if _compatible(diffs) else "NOT_TYPE_EXTENDED", "not")
    elif kind == "object":
        _compare_object(ctx, original, update, out)
    elif kind == "array":
        _compare_array(ctx, original, update, out)


def _same_value(a: Any, b: Any) -> bool:
    return _data_key(a) == _data_key(b) if (a is None) == (b is None) else False


def _values_info(original: _Node, update: _Node, key: str) -> str:
    reader, writer = _data_key(update.raw.get(key)), _data_key(original.raw.get(key))
    return f"reader {key}: {reader}, writer {key}: {writer}"


def _limit(
    out: _Out,
    key: str,
    name: str,
    original: Any,
    update: Any,
    lower: bool = False,
) -> None:
    """Confluent's ADDED/REMOVED/INCREASED/DECREASED for one numeric keyword."""
    o = original if isinstance(original, int | float) and not isinstance(original, bool) else None
    u = update if isinstance(update, int | float) and not isinstance(update, bool) else None
    if o == u:
        return
    info = f"reader {key}: {u}, writer {key}: {o}"
    if o is None:
        out.add(f"{name}_ADDED", key, info)
    elif u is None:
        out.add(f"{name}_REMOVED", key, info)
    elif o < u:
        out.add(f"{name}_INCREASED", key, info)
    elif o > u:
        out.add(f"{name}_DECREASED", key, info)


def _compare_string(original: dict[str, Any], update: dict[str, Any], out: _Out) -> None:
    _limit(out, "maxLength", "MAX_LENGTH", original.get("maxLength"), update.get("maxLength"))
    _limit(out, "minLength", "MIN_LENGTH", original.get("minLength"), update.get("minLength"))
    o, u = original.get("pattern"), update.get("pattern")
    info = f"reader pattern: {u}, writer pattern: {o}"
    if o is None and u is not None:
        out.add("PATTERN_ADDED", "pattern", info)
    elif o is not None and u is None:
        out.add("PATTERN_REMOVED", "pattern", info)
    elif o != u:
        out.add("PATTERN_CHANGED", "pattern", info)


def _bounds(node: _Node) -> dict[str, Any]:
    """maximum, minimum and the exclusive limits, draft 4's boolean exclusives read as
    the limits they mean."""
    raw = node.raw
    out = {k: raw.get(k) for k in ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")}
    for limit, exclusive in (("maximum", "exclusiveMaximum"), ("minimum", "exclusiveMinimum")):
        flag = out[exclusive]
        if isinstance(flag, bool):
            out[exclusive] = out[limit] if flag else None
            if flag:
                out[limit] = None
    return out


def _fraction(value: Any) -> Fraction | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def _compare_number(original: _Node, update: _Node, out: _Out) -> None:
    o, u = _bounds(original), _bounds(update)
    _limit(out, "maximum", "MAXIMUM", o["maximum"], u["maximum"])
    _limit(out, "minimum", "MINIMUM", o["minimum"], u["minimum"])
    _limit(
        out, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", o["exclusiveMaximum"], u["exclusiveMaximum"]
    )
    _limit(
        out, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", o["exclusiveMinimum"], u["exclusiveMinimum"]
    )
    om, um = _fraction(original.raw.get("multipleOf")), _fraction(update.raw.get("multipleOf"))
    if om != um:
        info = f"reader multipleOf: {um}, writer multipleOf: {om}"
        if om is None:
            out.add("MULTIPLE_OF_ADDED", "multipleOf", info)
        elif um is None:
            out.add("MULTIPLE_OF_REMOVED", "multipleOf", info)
        elif om != 0 and (um / om).denominator == 1:
            out.add("MULTIPLE_OF_EXPANDED", "multipleOf", info)
        elif um != 0 and (om / um).denominator == 1:
            out.add("MULTIPLE_OF_REDUCED", "multipleOf", info)
        else:
            out.add("MULTIPLE_OF_CHANGED", "multipleOf", info)
    if original.integer != update.integer:
        info = f"reader type: {_describe(update)}, writer type: {_describe(original)}"
        out.add("TYPE_EXTENDED" if original.integer else "TYPE_NARROWED", info=info)


def _compare_enum(original: _Node, update: _Node, out: _Out) -> None:
    o = {_data_key(v) for v in original.raw.get("enum", [])}
    u = {_data_key(v) for v in update.raw.get("enum", [])}
    if o == u:
        return
    info = _values_info(original, update, "enum")
    if u >= o:
        out.add("ENUM_ARRAY_EXTENDED", "enum", info)
    elif o >= u:
        out.add("ENUM_ARRAY_NARROWED", "enum", info)
    else:
        out.add("ENUM_ARRAY_CHANGED", "enum", info)


def _unique(nodes: list[_Node]) -> list[_Node]:
    """Subschemas with duplicates dropped, as Confluent collapses them into a set."""
    seen: set[str] = set()
    out = []
    for node in nodes:
        key = f"{node.kind}:{node.criterion}:{node.integer}:{_data_key(node.raw)}"
        if key not in seen:
            seen.add(key)
            out.append(node)
    return out


def _compare_combined(ctx: _Ctx, original: _Node, update: _Node, out: _Out) -> None:
    oc, uc = original.criterion, update.criterion
    osubs, usubs = original.subschemas, update.subschemas
    if oc != uc:
        if (
            uc == "anyOf"
            or (len(osubs) == 1 and len(usubs) == 1)
            or (len(osubs) == 1 and uc == "oneOf")
            or (len(usubs) == 1 and oc == "allOf")
        ):
            out.add("COMBINED_TYPE_EXTENDED", info=f"reader {uc}, writer {oc}")
        else:
            out.add("COMBINED_TYPE_CHANGED", info=f"reader {uc}, writer {oc}")
            return
    osubs, usubs = _unique(osubs), _unique(usubs)
    if len(osubs) < len(usubs):
        out.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(osubs) > len(usubs):
        out.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, tuple[Difference, ...]]] = {}
    for i, osub in enumerate(osubs):
        for j, usub in enumerate(usubs):
            diffs = _compare(ctx, osub, usub, f"{oc}/{i}")
            if _compatible(diffs):
                edges.setdefault(i, {})[j] = diffs
    matching = _max_matching(edges)
    for i, j in sorted(matching.items()):
        out.out.extend(edges[i][j])
    if len(matching) < min(len(osubs), len(usubs)):
        out.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _max_matching(edges: dict[int, dict[int, Any]]) -> dict[int, int]:
    """A maximum bipartite matching (Kuhn's augmenting paths) from left to right."""
    right_of: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges.get(i, {}):
            if j in seen:
                continue
            seen.add(j)
            if j not in right_of or augment(right_of[j], seen):
                right_of[j] = i
                return True
        return False

    for i in edges:
        augment(i, set())
    return {i: j for j, i in right_of.items()}


def _object_open(node: _Node) -> bool:
    if node.additional is not True or node.pattern_properties:
        return False
    return node.unevaluated is None or node.unevaluated.kind == "empty"


def _object_partial(node: _Node, name: str) -> _Node | None:
    for pattern, schema in node.pattern_properties:
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    if isinstance(node.additional, _Node):
        return node.additional
    unevaluated = node.unevaluated
    if node.additional is True and unevaluated and unevaluated.kind not in ("false", "empty"):
        return unevaluated
    return None


def _compare_object(ctx: _Ctx, original: _Node, update: _Node, out: _Out) -> None:
    for name in original.properties:
        if name in update.properties:
            was, now = name in original.required, name in update.required
            if was and not now:
                out.add("REQUIRED_ATTRIBUTE_REMOVED", f"required/{name}")
            elif now and not was:
                if update.properties[name].has_default():
                    out.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", f"required/{name}")
                else:
                    out.add("REQUIRED_ATTRIBUTE_ADDED", f"required/{name}")

    names = list(original.properties) + [
        n for n in update.properties if n not in original.properties
    ]
    for name in names:
        at = f"properties/{name}"
        o, u = original.properties.get(name), update.properties.get(name)
        if u is None:
            assert o is not None
            # Only the reader's model matters: it decides whether the property may still come.
            if _object_open(update):
                out.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", at)
                continue
            partial = _object_partial(update, name)
            if partial is not None:
                diffs = _compare(ctx, o, partial, at)
                out.out.extend(diffs)
                out.add(
                    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if _compatible(diffs)
                    else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                    at,
                )
            elif o.kind == "false":
                out.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
            else:
                out.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
        elif o is None:
            # Only the writer's model matters: it decides whether the property may have come.
            required = name in update.required
            if _object_open(original):
                if u.kind == "empty":
                    out.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", at)
                elif required and u.has_default():
                    out.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL", at)
                elif required:
                    out.add("REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at)
                else:
                    out.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", at)
                continue
            partial = _object_partial(original, name)
            if partial is not None:
                diffs = _compare(ctx, partial, u, at)
                out.out.extend(diffs)
                out.add(
                    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if _compatible(diffs)
                    else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                    at,
                )
            if required and u.has_default():
                out.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL", at)
            elif required:
                out.add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", at)
            else:
                out.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", at)
        else:
            out.sub(ctx, o, u, at)

    # Paths use draft 7's words whatever the draft, as Confluent's do.
    for name in _union(original.dep_arrays, update.dep_arrays):
        at = f"dependencies/{name}"
        o_deps, u_deps = original.dep_arrays.get(name), update.dep_arrays.get(name)
        if u_deps is None:
            out.add("DEPENDENCY_ARRAY_REMOVED", at)
        elif o_deps is None:
            out.add("DEPENDENCY_ARRAY_ADDED", at)
        elif o_deps != u_deps:
            if u_deps >= o_deps:
                out.add("DEPENDENCY_ARRAY_EXTENDED", at)
            elif o_deps >= u_deps:
                out.add("DEPENDENCY_ARRAY_NARROWED", at)
            else:
                out.add("DEPENDENCY_ARRAY_CHANGED", at)
    for name in _union(original.dep_schemas, update.dep_schemas):
        at = f"dependencies/{name}"
        o_schema, u_schema = original.dep_schemas.get(name), update.dep_schemas.get(name)
        if u_schema is None:
            out.add("DEPENDENCY_SCHEMA_REMOVED", at)
        elif o_schema is None:
            out.add("DEPENDENCY_SCHEMA_ADDED", at)
        else:
            out.sub(ctx, o_schema, u_schema, at)

    _compare_tail(ctx, original, update, out, "additionalProperties", "ADDITIONAL_PROPERTIES")
    _compare_unevaluated(
        ctx, original, update, out, "unevaluatedProperties", "UNEVALUATED_PROPERTIES"
    )
    raw_o, raw_u = original.raw, update.raw
    _limit(
        out,
        "maxProperties",
        "MAX_PROPERTIES",
        raw_o.get("maxProperties"),
        raw_u.get("maxProperties"),
    )
    _limit(
        out,
        "minProperties",
        "MIN_PROPERTIES",
        raw_o.get("minProperties"),
        raw_u.get("minProperties"),
    )


def _union(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return list(a) + [k for k in b if k not in a]


def _compare_tail(ctx: _Ctx, original: _Node, update: _Node, out: _Out, at: str, name: str) -> None:
    """additionalProperties / additionalItems: true, false or a schema."""
    o, u = original.additional, update.additional
    o_permits, u_permits = o is not False, u is not False
    if o_permits != u_permits:
        out.add(f"{name}_ADDED" if u_permits else f"{name}_REMOVED", at)
    elif isinstance(u, _Node) and not isinstance(o, _Node):
        out.add(f"{name}_NARROWED", at)
    elif isinstance(o, _Node) and not isinstance(u, _Node):
        out.add(f"{name}_EXTENDED", at)
    elif isinstance(o, _Node) and isinstance(u, _Node):
        out.sub(ctx, o, u, at)


def _compare_unevaluated(
    ctx: _Ctx, original: _Node, update: _Node, out: _Out, at: str, name: str
) -> None:
    o, u = original.unevaluated, update.unevaluated
    if o is None and u is None:
        return
    if o is None:
        assert u is not None
        out.add(f"{name}_REMOVED" if u.kind == "false" else f"{name}_NARROWED", at)
    elif u is None:
        out.add(f"{name}_ADDED" if o.kind == "false" else f"{name}_EXTENDED", at)
    elif o.kind == "false" and u.kind != "false":
        out.add(f"{name}_ADDED", at)
    elif o.kind != "false" and u.kind == "false":
        out.add(f"{name}_REMOVED", at)
    elif o.kind == "empty" and u.kind != "empty":
        out.add(f"{name}_NARROWED", at)
    elif o.kind != "empty" and u.kind == "empty":
        out.add(f"{name}_EXTENDED", at)
    else:
        out.sub(ctx, o, u, at)


def _array_open(node: _Node) -> bool:
    if node.additional is not True:
        return False
    return node.unevaluated is None or node.unevaluated.kind == "empty"


def _array_partial(node: _Node) -> _Node | None:
    if isinstance(node.additional, _Node):
        return node.additional
    unevaluated = node.unevaluated
    if node.additional is True and unevaluated and unevaluated.kind not in ("false", "empty"):
        return unevaluated
    return None


def _compare_array(ctx: _Ctx, original: _Node, update: _Node, out: _Out) -> None:
    out.sub(ctx, original.all_items, update.all_items, "items")
    o_items, u_items = original.item_list or [], update.item_list or []
    word = "items"
    for index in range(min(len(o_items), len(u_items))):
        out.sub(ctx, o_items[index], u_items[index], f"{word}/{index}")
    for index in range(len(u_items), len(o_items)):
        at, o = f"{word}/{index}", o_items[index]
        if _array_open(update):
            out.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", at)
            continue
        partial = _array_partial(update)
        if partial is not None:
            diffs = _compare(ctx, o, partial, at)
            out.out.extend(diffs)
            out.add(
                "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if _compatible(diffs)
                else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                at,
            )
        elif o.kind == "false":
            out.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
        else:
            out.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", at)
    for index in range(len(o_items), len(u_items)):
        at, u = f"{word}/{index}", u_items[index]
        if _array_open(original):
            if u.kind == "empty":
                out.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", at)
            else:
                out.add("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", at)
            continue
        partial = _array_partial(original)
        if partial is not None:
            diffs = _compare(ctx, partial, u, at)
            out.out.extend(diffs)
            out.add(
                "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if _compatible(diffs)
                else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                at,
            )
        else:
            out.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", at)
    _compare_tail(ctx, original, update, out, "additionalItems", "ADDITIONAL_ITEMS")
    _compare_unevaluated(ctx, original, update, out, "unevaluatedItems", "UNEVALUATED_ITEMS")
    o, u = original.raw, update.raw
    _limit(out, "maxItems", "MAX_ITEMS", o.get("maxItems"), u.get("maxItems"))
    _limit(out, "minItems", "MIN_ITEMS", o.get("minItems"), u.get("minItems"))
    if bool(o.get("uniqueItems")) != bool(u.get("uniqueItems")):
        out.add(
            "UNIQUE_ITEMS_REMOVED" if o.get("uniqueItems") else "UNIQUE_ITEMS_ADDED", "uniqueItems"
        )
    _limit(out, "maxContains", "MAX_CONTAINS", o.get("maxContains"), u.get("maxContains"))
    _limit(out, "minContains", "MIN_CONTAINS", o.get("minContains"), u.get("minContains"))
