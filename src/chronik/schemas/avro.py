"""Avro schemas for the registry and the event paths: parse (with named references),
canonical text, normal form, Confluent's reader/writer compatibility messages, value checks,
and Avro binary encode/decode.

Two libraries do the work, each for what it is the reference for: the ``avro`` package's
``ReaderWriterCompatibilityChecker`` decides compatibility the way Apache Avro (and so
Confluent) does, and ``fastavro`` validates values and does the binary codec. A schema is
parsed by both, either refusing it makes it invalid, and field defaults are checked here as
Confluent's Java parser checks them. Every failure surfaces as ``SchemaError`` or
``ValueMismatch``, so that junk from a client never crashes a caller.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import avro.name
import avro.schema
import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import parse_schema
from fastavro.validation import ValidationError
from fastavro.validation import validate as fastavro_validate

from .types import ParsedSchema, SchemaError, ValueMismatch

__all__ = ["FORMAT", "MAX_DEPTH", "AvroFormat", "AvroSchema"]

# Deeper documents are refused before any recursive parser sees them: the JSON decoder,
# both Avro libraries and the compatibility checker all recurse once (or more) per level.
MAX_DEPTH = 200

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "enum", "fixed"})
_KEY_ORDER = (
    "type",
    "name",
    "fields",
    "symbols",
    "items",
    "values",
    "size",
    "default",
    "aliases",
    "doc",
)

_DESCRIPTIONS = {
    "NAME_MISMATCH": "The name of the schema has changed (path '{location}')",
    "FIXED_SIZE_MISMATCH": (
        "The size of FIXED type field at path '{location}' in the new schema does not match"
        " with the old schema"
    ),
    "MISSING_ENUM_SYMBOLS": (
        "The new schema is missing enum symbols '{message}' at path '{location}' in the old schema"
    ),
    "READER_FIELD_MISSING_DEFAULT_VALUE": (
        "The field '{message}' at path '{location}' in the new schema has no default value and"
        " is missing in the old schema"
    ),
    "TYPE_MISMATCH": (
        "The type (path '{location}') of a field in the new schema does not match with the old"
        " schema"
    ),
    "MISSING_UNION_BRANCH": (
        "The new schema is missing a type inside a union field at path '{location}' in the old"
        " schema"
    ),
}


# --- the compatibility checker ---------------------------------------------------------------
#
# The avro package's checker keeps a result's messages and locations as sets beside the list
# of incompatibility kinds, so which message and path belong to which kind is lost once two
# results merge. A private copy of its module (the shared ``avro.compatibility`` stays as it
# is) gets ``incompatible`` and ``merge`` wrapped to carry (kind, message, path) triples in
# step with that list; what is compatible is still decided by the upstream code alone.


def _load_checker() -> ModuleType:
    spec = importlib.util.find_spec("avro.compatibility")
    if spec is None or spec.loader is None:  # pragma: no cover - avro is a dependency
        raise ImportError("avro.compatibility")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    upstream_incompatible = module.incompatible
    upstream_merge = module.merge

    def incompatible(kind: Any, message: str, location: list[str]) -> Any:
        result = upstream_incompatible(kind, message, location)
        result.found = [(kind.name.upper(), _java_message(kind.name, message), *result.locations)]
        return result

    def merge(this: Any, that: Any) -> Any:
        result = upstream_merge(this, that)
        result.found = [*getattr(this, "found", ()), *getattr(that, "found", ())]
        return result

    module.incompatible = incompatible
    module.merge = merge
    return module


def _java_message(kind: str, message: str) -> str:
    """The checker's detail as Apache Avro's Java checker (and so Confluent) words it, so a
    client comparing messages sees the same text: type names upper case, symbol sets as
    ``[A, B]``."""
    if kind == "type_mismatch":
        match = re.fullmatch(r"reader type: (\w+) not compatible with writer type: (\w+)", message)
        if match:
            reader, writer = match.groups()
            return (
                f"reader type: {reader.upper()} not compatible with writer type: {writer.upper()}"
            )
    elif kind == "missing_union_branch":
        match = re.fullmatch(r"reader union lacking writer type:? (\w+)", message)
        if match:
            return f"reader union lacking writer type: {match.group(1).upper()}"
    elif kind == "missing_enum_symbols":
        try:
            symbols = ast.literal_eval(message)
        except (ValueError, SyntaxError):
            return message
        if isinstance(symbols, set | frozenset | list | tuple):
            return "[" + ", ".join(sorted(str(s) for s in symbols)) + "]"
    return message


_checker_module = _load_checker()


class _Checker(_checker_module.ReaderWriterCompatibilityChecker):  # type: ignore[name-defined,misc]
    """The upstream checker descends into union branches without passing the path it is at,
    so anything found under a union is reported at ``/``; the Java checker keeps the path.
    Calls without a path continue from the caller's path."""

    def __init__(self) -> None:
        super().__init__()
        self._paths: list[list[str]] = []

    def get_compatibility(
        self,
        reader: Any,
        writer: Any,
        reference_token: str = "/",
        location: list[str] | None = None,
    ) -> Any:
        if location is None and self._paths:
            here = self._paths[-1]
            return super().get_compatibility(reader, writer, here[-1], here[:-1])
        return super().get_compatibility(reader, writer, reference_token, location)

    def calculate_compatibility(self, reader: Any, writer: Any, location: list[str]) -> Any:
        self._paths.append(location)
        try:
            return super().calculate_compatibility(reader, writer, location)
        finally:
            self._paths.pop()


def _confluent_message(kind: str, message: str, location: str) -> str:
    description = _DESCRIPTIONS.get(kind, "{message}").format(message=message, location=location)
    return f"{{errorType:'{kind}', description:'{description}', additionalInfo:'{message}'}}"


# --- parsing ---------------------------------------------------------------------------------


def _load(text: str, what: str) -> Any:
    if not isinstance(text, str):
        raise SchemaError(f"{what}: the schema must be a JSON string, not {type(text).__name__}")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise SchemaError(f"{what}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise SchemaError(f"{what}: not valid JSON: {e}") from None
    _check_depth(doc, what)
    return doc


def _check_depth(doc: Any, what: str) -> None:
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError(f"{what}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _refuse_unsupported(doc: Any, what: str) -> None:
    """Refuse what the libraries accept but cannot serve: an ``error`` type (Avro protocols
    only; the checker has no rule for it) and an empty union (no value fits it, and nothing
    can be written with it)."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if not node:
                raise SchemaError(f"{what}: a union needs at least one branch")
            stack.extend(node)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind == "error":
                raise SchemaError(f"{what}: 'error' is a protocol type, not a schema type")
            if isinstance(kind, dict | list):
                stack.append(kind)
            fields = node.get("fields") if kind == "record" else None
            if isinstance(fields, list):
                stack.extend(f.get("type") for f in fields if isinstance(f, dict))
            for key in ("items", "values"):
                if key in node and kind in ("array", "map"):
                    stack.append(node[key])


class _Definitions:
    """The named types known while parsing one schema, in both libraries' registries. A failed
    parse may leave half a type behind, so each document is added all or nothing."""

    def __init__(self) -> None:
        self.names = avro.name.Names()
        self.fast: dict[str, Any] = {}

    def add(self, doc: Any) -> tuple[avro.schema.Schema, Any]:
        saved = (dict(self.names.names), self.names.default_namespace, dict(self.fast))
        try:
            parsed = avro.schema.make_avsc_object(doc, self.names)
            fast = parse_schema(doc, named_schemas=self.fast)
        except BaseException:
            self.names.names, self.names.default_namespace, self.fast = saved
            raise
        return parsed, fast


def _failure(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return f"nested deeper than {MAX_DEPTH} levels"
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "..."


class AvroFormat:
    """The Avro format of the registry: ``parse`` a schema text with its resolved references."""

    def parse(self, text: str, references: Mapping[str, str]) -> AvroSchema:
        """Parse ``text``; ``references`` maps each referenced type's full name to that
        schema's text (transitive references included, in any order: each is parsed once the
        types it uses are known). Raise SchemaError naming what is wrong."""
        refs = dict(references or {})
        definitions = _Definitions()
        ref_docs = _parse_references(refs, definitions)
        doc = _load(text, "schema")
        _refuse_unsupported(doc, "schema")
        try:
            parsed, fast = definitions.add(doc)
        except Exception as e:
            raise SchemaError(f"invalid Avro schema: {_failure(e)}") from None
        _check_defaults(definitions.names)
        _resolve_aliases(definitions.names)
        try:
            normalizer = _Normalizer()
            for ref_doc in ref_docs:
                normalizer.define_only(ref_doc)
            normal, depth = normalizer.normalize(doc)
            canonical = _compact(_collapse(doc))
        except Exception as e:  # both libraries accepted it, so only a shape neither checks
            raise SchemaError(f"invalid Avro schema: {_failure(e)}") from None
        if depth > MAX_DEPTH:
            raise SchemaError(f"schema: nested deeper than {MAX_DEPTH} levels with its references")
        return AvroSchema(
            canonical=canonical,
            normal=_compact(normal),
            references=refs,
            parsed=parsed,
            fast=fast,
        )


def _parse_references(refs: Mapping[str, str], definitions: _Definitions) -> list[Any]:
    pending = [(name, _load(text, f"reference '{name}'")) for name, text in refs.items()]
    for name, doc in pending:
        _refuse_unsupported(doc, f"reference '{name}'")
    done: list[Any] = []
    while pending:
        waiting: list[tuple[str, Any]] = []
        first_error: tuple[str, BaseException] | None = None
        for name, doc in pending:
            try:
                definitions.add(doc)
            except Exception as e:
                waiting.append((name, doc))
                first_error = first_error or (name, e)
            else:
                done.append(doc)
        if first_error is not None and len(waiting) == len(pending):
            name, e = first_error
            raise SchemaError(f"invalid Avro schema in reference '{name}': {_failure(e)}")
        pending = waiting
    return done


def _check_defaults(names: avro.name.Names) -> None:
    """Refuse a field default that does not fit its field's type, as Confluent does (the Java
    parser validates defaults; fastavro only looks at primitive ones, and shallowly)."""
    for schema in names.names.values():
        if not isinstance(schema, avro.schema.RecordSchema):
            continue
        for field in schema.fields:
            if field.has_default and not _default_fits(field.type, field.default):
                raise SchemaError(
                    f"invalid Avro schema: the default {_short(field.default)} of field"
                    f" '{field.name}' in '{schema.fullname}' does not fit its type"
                )


_INT_RANGES = {"int": 2**31, "long": 2**63}


def _default_fits(schema: avro.schema.Schema, value: Any) -> bool:
    """Whether a default in its JSON form fits ``schema``: Java's ``isValidDefault`` (a union's
    default fits its first branch; bytes and fixed are JSON strings), and an enum's default is
    one of its symbols."""
    kind = schema.type
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _INT_RANGES:
        bound = _INT_RANGES[kind]
        return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("string", "bytes", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in schema.symbols
    if kind == "array":
        return isinstance(value, list) and all(_default_fits(schema.items, v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(
            _default_fits(schema.values, v) for v in value.values()
        )
    if kind in ("record", "error"):
        return isinstance(value, dict) and all(
            _default_fits(f.type, value[f.name]) if f.name in value else f.has_default
            for f in schema.fields
        )
    if kind == "union":
        return bool(schema.schemas) and _default_fits(schema.schemas[0], value)
    return False


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _resolve_aliases(names: avro.name.Names) -> None:
    """Spell a named type's aliases as full names, as the Java parser does: the checker
    compares them with the writer's full name, so an alias written relative to its
    namespace would otherwise never match."""
    for schema in names.names.values():
        aliases = schema.props.get("aliases")
        namespace = getattr(schema, "namespace", None)
        if isinstance(aliases, list) and namespace:
            schema.set_prop(
                "aliases",
                [a if not isinstance(a, str) or "." in a else f"{namespace}.{a}" for a in aliases],
            )


def _compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _collapse(node: Any) -> Any:
    """The schema as given, with ``{"type": "string"}`` (no other attribute) written as
    ``"string"`` wherever a schema stands; defaults and other values are left alone."""
    if isinstance(node, list):
        return [_collapse(branch) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if len(node) == 1 and kind in PRIMITIVES:
        return kind
    out = dict(node)
    if isinstance(kind, dict | list):
        out["type"] = _collapse(kind)
    if kind == "record" and isinstance(node.get("fields"), list):
        out["fields"] = [
            {**f, "type": _collapse(f["type"])} if isinstance(f, dict) and "type" in f else f
            for f in node["fields"]
        ]
    if kind == "array" and "items" in node:
        out["items"] = _collapse(node["items"])
    if kind == "map" and "values" in node:
        out["values"] = _collapse(node["values"])
    return out


def _ordered(props: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: props[k] for k in _KEY_ORDER if k in props}
    out.update((k, props[k]) for k in sorted(props) if k not in out)
    return out


class _Normalizer:
    """Rewrites a parsed (so structurally valid) schema document into the normal form and
    measures its depth with referenced types counted where they are used."""

    def __init__(self) -> None:
        self.depths: dict[str, int] = {}  # full name -> depth of its definition
        self.open: set[str] = set()  # named types being defined (recursion)

    def define_only(self, doc: Any) -> None:
        self.normalize(doc)

    def normalize(self, doc: Any) -> tuple[Any, int]:
        return self._node(doc, "")

    def _full(self, name: str, namespace: str) -> str:
        if "." in name or not namespace:
            return name
        qualified = f"{namespace}.{name}"
        if qualified in self.depths or qualified in self.open or name not in self.depths:
            return qualified
        return name

    def _node(self, node: Any, namespace: str) -> tuple[Any, int]:
        if isinstance(node, str):
            if node in PRIMITIVES:
                return node, 1
            full = self._full(node, namespace)
            return full, 1 if full in self.open else self.depths.get(full, 1)
        if isinstance(node, list):
            branches = [self._node(branch, namespace) for branch in node]
            return [b for b, _ in branches], 1 + max((d for _, d in branches), default=0)
        kind = node["type"]
        if isinstance(kind, dict | list):
            return self._node(kind, namespace)
        if kind in NAMED:
            return self._named(node, namespace)
        props = {k: v for k, v in node.items() if k != "namespace"}
        if kind in PRIMITIVES:
            return (kind, 1) if len(props) == 1 else (_ordered(props), 1)
        if kind == "array":
            props["items"], depth = self._node(node["items"], namespace)
        elif kind == "map":
            props["values"], depth = self._node(node["values"], namespace)
        else:
            # A name written as {"type": "com.acme.Address"}.
            name, depth = self._node(kind, namespace)
            return (name, depth) if len(props) == 1 else (_ordered({**props, "type": name}), depth)
        return _ordered(props), 1 + depth

    def _named(self, node: Mapping[str, Any], outer: str) -> tuple[Any, int]:
        name = node["name"]
        if "." in name:
            full = name
        else:
            space = node.get("namespace", outer) or ""
            full = f"{space}.{name}" if space else name
        namespace = full.rpartition(".")[0]
        props = {k: v for k, v in node.items() if k != "namespace"}
        props["name"] = full
        if not namespace and outer:
            # Without it, a bare name inside a namespaced type would take that namespace.
            props["namespace"] = ""
        if isinstance(node.get("aliases"), list):
            props["aliases"] = [
                a if not isinstance(a, str) or "." in a or not namespace else f"{namespace}.{a}"
                for a in node["aliases"]
            ]
        self.open.add(full)
        depth = 1
        try:
            if node["type"] == "record":
                fields = []
                for field in node.get("fields") or []:
                    field_type, field_depth = self._node(field["type"], namespace)
                    fields.append(_ordered({**field, "type": field_type}))
                    depth = max(depth, 1 + field_depth)
                props["fields"] = fields
        finally:
            self.open.discard(full)
        self.depths[full] = depth
        return _ordered(props), depth


# --- the parsed schema -----------------------------------------------------------------------


class AvroSchema:
    """A parsed Avro schema (see ParsedSchema); both libraries' parsed forms are kept."""

    schema_type = "AVRO"

    def __init__(
        self,
        *,
        canonical: str,
        normal: str,
        references: Mapping[str, str],
        parsed: avro.schema.Schema,
        fast: Any,
    ) -> None:
        self._canonical = canonical
        self._normal = normal
        self.references: Mapping[str, str] = dict(references)
        self._parsed = parsed
        self._fast = fast
        self._normalized: AvroSchema | None = None

    def __repr__(self) -> str:
        return f"AvroSchema({self._canonical})"

    @property
    def fastavro_schema(self) -> Any:
        """The fastavro-parsed schema (referenced types included), for readers and writers."""
        return self._fast

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> AvroSchema:
        """The normal form: full names (no ``namespace``), keys in a fixed order (type, name,
        fields / symbols / items / values / size, default, aliases, doc, then the others
        sorted), each named type defined at its first use and named afterwards; defaults,
        aliases, logical types and other properties kept. Referenced types stay references."""
        if self._normalized is None:
            if self._normal == self._canonical:
                self._normalized = self
            else:
                self._normalized = FORMAT.parse(self._normal, self.references)
        return self._normalized

    def compatibility_errors(self, writer: ParsedSchema) -> list[str]:
        """Confluent's verbose messages for what breaks when this schema reads data written
        with ``writer``, decided by the avro package's ReaderWriterCompatibilityChecker; the
        additionalInfo is the checker's detail in the Java checker's wording."""
        if not isinstance(writer, AvroSchema):
            return ["Incompatible because of different schema type"]
        try:
            result = _Checker().get_compatibility(self._parsed, writer._parsed)
        except RecursionError:
            raise SchemaError(f"schema nested deeper than {MAX_DEPTH} levels") from None
        except Exception as e:
            raise SchemaError(f"cannot compare the schemas: {_failure(e)}") from None
        if result.compatibility is _checker_module.SchemaCompatibilityType.compatible:
            return []
        found = getattr(result, "found", None) or [
            (kind.name.upper(), "; ".join(sorted(result.messages)), "/")
            for kind in result.incompatibilities
        ]
        return [_confluent_message(kind, message, location) for kind, message, location in found]

    def validate(self, value: Any) -> None:
        """Raise ValueMismatch unless ``value`` fits, as fastavro's validation decides for
        Python values: a record is a dict (fields beyond the schema's are ignored), bytes and
        fixed are ``bytes``, an enum is its symbol, and a union takes the plain value of one of
        its branches, not Avro's JSON encoding ``{"string": "x"}`` (fastavro's
        ``("name", value)`` tuple naming the branch is accepted too)."""
        try:
            fastavro_validate(value, self._fast, raise_errors=True)
        except ValidationError as e:
            raise ValueMismatch(_mismatch(e)) from None
        except RecursionError:
            raise ValueMismatch("value nested too deep to check") from None
        except Exception as e:
            raise ValueMismatch(f"value does not fit the schema: {_failure(e)}") from None

    def encode(self, value: Any) -> bytes:
        """The Avro binary encoding of ``value`` (no framing); ValueMismatch unless it fits."""
        self.validate(value)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self._fast, value)
        except Exception as e:
            raise ValueMismatch(f"value does not encode: {_failure(e)}") from None
        return out.getvalue()

    def decode(self, payload: bytes, reader: AvroSchema | None = None) -> Any:
        """The value in ``payload`` (Avro binary written with this schema), resolved into
        ``reader`` when given (fields the writer lacks take the reader's defaults).
        ValueMismatch when the bytes are not one value of this schema (trailing bytes
        included); SchemaError when ``reader`` cannot read this schema's data."""
        data = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(
                data, self._fast, reader._fast if reader is not None else None
            )
        except SchemaResolutionError as e:
            raise SchemaError(f"the reader schema cannot read this data: {_failure(e)}") from None
        except Exception as e:
            raise ValueMismatch(f"payload does not decode: {_failure(e)}") from None
        if data.tell() != len(payload):
            raise ValueMismatch(
                f"payload has {len(payload) - data.tell()} bytes after the value it holds"
            )
        return value


def _mismatch(e: ValidationError) -> str:
    by_field: dict[str, tuple[Any, list[Any]]] = {}
    for error in getattr(e, "errors", ()) or ():
        by_field.setdefault(error.field or "", (error.datum, []))[1].append(error.schema)
    if not by_field:
        return f"value does not fit the schema: {_failure(e)}"
    parts = []
    for field, (datum, schemas) in list(by_field.items())[:3]:
        where = f"field '{field}'" if field else "value"
        shown = repr(datum)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        wanted = " or ".join(_describe(s) for s in schemas)
        parts.append(f"{where}: {shown} ({type(datum).__name__}) is not {wanted}")
    return "; ".join(parts)


def _describe(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    if isinstance(schema, list):
        return "union"
    return str(schema)


FORMAT = AvroFormat()
