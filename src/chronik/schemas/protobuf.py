"""The PROTOBUF format: .proto files parsed by protoc into descriptors, their normal form,
Confluent's Protobuf compatibility rules, and values checked, encoded and decoded through
dynamic message classes.

protoc (the one bundled with grpcio-tools) is the parser, so a schema is accepted exactly
when protoc accepts it and imports resolve the way every Protobuf toolchain resolves them:
through the registered references, plus the well-known types (google/protobuf/*.proto)
which need no reference. protoc runs in a child process because it reports errors on the
process's own stderr, which cannot be captured reliably in-process; parsed schemas are
kept in a small LRU since a parse costs a process start.

``canonical()`` is the text as given with trailing whitespace trimmed: Confluent stores and
answers with the text it was sent, so anything more would answer lookups differently.
``normalized()`` prints a .proto from the descriptor: imports and options sorted, fields
by number (a oneof where its lowest number falls), reserved and extension ranges sorted,
enum values by number after the first, every type name fully qualified. Files that differ
in layout, comments, spelling of type names or order of fields and options share it.
Messages, enums and services keep their declaration order, as in Confluent's normal form:
the wire format names a record's message by its position (the message indexes) and the
first message is the default one, so sorting them by name would change what records
mean; likewise the first enum value is proto2's implicit default.

Compatibility follows Confluent's protobuf-provider diff (messages compared by name at each
level, fields by number, the first message being the one records use unless told
otherwise). Difference types, with the incompatible ones reported:

- reported: PACKAGE_CHANGED, MESSAGE_REMOVED, FIELD_KIND_CHANGED (scalar/enum vs message vs
  map), FIELD_SCALAR_KIND_CHANGED (outside the wire-compatible groups int32/uint32/int64/
  uint64/bool/enum; sint32/sint64; fixed32/sfixed32; fixed64/sfixed64; string/bytes;
  float; double), FIELD_NAMED_TYPE_CHANGED (another message type, or the same one changed
  incompatibly), FIELD_NUMERIC_LABEL_CHANGED (a numeric or enum field's label changed,
  such as optional to repeated), REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED,
  ONEOF_FIELD_REMOVED, FIELD_MOVED_TO_EXISTING_ONEOF, MULTIPLE_FIELDS_MOVED_TO_ONEOF.
- compatible, as in Confluent: MESSAGE_ADDED, MESSAGE_MOVED, ENUM_ADDED, ENUM_REMOVED,
  ENUM_CONST_ADDED, ENUM_CONST_CHANGED, ENUM_CONST_REMOVED, FIELD_ADDED, FIELD_REMOVED,
  FIELD_NAME_CHANGED, FIELD_STRING_OR_BYTES_LABEL_CHANGED, ONEOF_ADDED, ONEOF_REMOVED,
  ONEOF_FIELD_ADDED, ONEOF_FIELD_MOVED_TO_TOP_LEVEL. A field removed and its number
  reused with another type shows as the kind change of that number (against the version
  that still had it, so under a _TRANSITIVE level).
- not in Confluent's rules, so off unless ``strict=True`` (turning them on would refuse
  schemas Confluent accepts): SYNTAX_VERSION_CHANGED (proto2 vs proto3),
  RESERVED_FIELD_REUSED (the reader uses a number or name the writer reserved), and a
  label change between proto3's implicit presence and ``repeated``, which Confluent does not
  compare because its parser gives such fields no label.
- not covered: differences inside custom options, extensions (compared by neither), and
  editions features.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from threading import Lock
from typing import Any

from google.protobuf import descriptor_pb2, json_format, message_factory, text_encoding, text_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message

from .types import ParsedSchema, SchemaError, ValueMismatch

FDP = descriptor_pb2.FieldDescriptorProto
_PROTOC_TIMEOUT = 30.0
_CACHE_SIZE = 128
_MAIN_FILE = "schema.proto"


def _well_known_include() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


# --------------------------------------------------------------------------- parsing


def _run_protoc(text: str, references: Mapping[str, str]) -> descriptor_pb2.FileDescriptorSet:
    main = _MAIN_FILE
    n = 0
    while main in references:
        n += 1
        main = f"schema_{n}.proto"
    with tempfile.TemporaryDirectory(prefix="chronik-proto-") as tmp:
        src = os.path.join(tmp, "src")
        for name, body in {**references, main: text}.items():
            path = os.path.normpath(os.path.join(src, name))
            if os.path.isabs(name) or not path.startswith(src + os.sep):
                raise SchemaError(f"reference name {name!r} is not a relative .proto path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
        out = os.path.join(tmp, "set.pb")
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={src}",
            f"--proto_path={_well_known_include()}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            main,
        ]
        try:
            done = subprocess.run(
                cmd, cwd=src, capture_output=True, text=True, timeout=_PROTOC_TIMEOUT
            )
        except subprocess.TimeoutExpired as e:
            raise SchemaError("protoc did not finish parsing the schema in time") from e
        if done.returncode != 0 or not os.path.exists(out):
            raise SchemaError(_protoc_errors(done.stderr or done.stdout, src, tmp))
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


# protoc's own log lines (absl's "W0000 00:00:... file.cc:123] ..." and its preamble)
# are warnings, not the reason a schema is refused.
_LOG_LINE = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} [\d:.]+ +\d+ \S+\] )")


def _protoc_errors(output: str, src: str, tmp: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if not _LOG_LINE.match(line)] or lines
    message = "\n".join(errors).replace(src + os.sep, "").replace(tmp, "")
    return message.strip() or "protoc refused the schema"


class _Cache:
    """A bounded LRU of parsed schemas by (text, references)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], ProtobufSchema] = (
            OrderedDict()
        )
        self._lock = Lock()

    def get(self, key: tuple[str, tuple[tuple[str, str], ...]]) -> ProtobufSchema | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[str, tuple[tuple[str, str], ...]], value: ProtobufSchema) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class ProtobufFormat:
    def __init__(self, cache_size: int = _CACHE_SIZE) -> None:
        self._cache = _Cache(cache_size)

    def parse(self, text: str, references: Mapping[str, str]) -> ProtobufSchema:
        if not isinstance(text, str) or not text.strip():
            raise SchemaError("empty Protobuf schema")
        key = (text, tuple(sorted(references.items())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        descriptor = _descriptor_of(text)
        if descriptor is not None:
            # A serialized FileDescriptorProto in base64, as confluent-kafka's Python
            # serializer registers one: kept as the .proto text it describes, as
            # Confluent's registry keeps it.
            printed = _Printer(
                ProtobufSchema(
                    "", dict(references), descriptor_pb2.FileDescriptorSet(file=[descriptor])
                )
            ).file()
            return self.parse(printed, references)
        fds = _run_protoc(text, references)
        schema = ProtobufSchema(text, dict(references), fds)
        self._cache.put(key, schema)
        return schema


FORMAT = ProtobufFormat()


def _descriptor_of(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto a schema text holds in base64, or None for .proto text."""
    compact = "".join(text.split())
    if not compact or len(compact) % 4 or ";" in text or "{" in text:
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    if not descriptor.message_type and not descriptor.enum_type:
        return None
    return descriptor


# --------------------------------------------------------------------------- the schema


def _is_map_entry(msg: descriptor_pb2.DescriptorProto) -> bool:
    return msg.options.map_entry


def _messages(container: Any) -> list[descriptor_pb2.DescriptorProto]:
    """The messages a file or message declares, without protoc's generated map entries (as
    Confluent's parser, and so its message indexes, sees them)."""
    types = container.message_type if hasattr(container, "message_type") else container.nested_type
    return [m for m in types if not _is_map_entry(m)]


class ProtobufSchema:
    schema_type = "PROTOBUF"

    def __init__(
        self, text: str, references: dict[str, str], fds: descriptor_pb2.FileDescriptorSet
    ) -> None:
        self._text = text
        self._references = references
        self.file_set = fds
        self.file: descriptor_pb2.FileDescriptorProto = fds.file[-1]
        self._pool: DescriptorPool | None = None
        self._pool_lock = Lock()
        # Every message and enum of the file and its imports by full name, and the package
        # each was declared in (a type's local name is its full name without it).
        self._types: dict[str, Any] = {}
        self._type_package: dict[str, str] = {}
        for f in fds.file:
            _index_types(f, self._types, self._type_package)

    # ---- ParsedSchema

    def canonical(self) -> str:
        return self._text.rstrip()

    def normalized(self) -> ProtobufSchema:
        return FORMAT.parse(self.normal_text(), self._references)

    def normal_text(self) -> str:
        return _Printer(self).file()

    def compatibility_errors(
        self,
        writer: ParsedSchema,
        *,
        strict: bool = False,
        reader_role: str = "new",
        writer_role: str = "old",
    ) -> list[str]:
        """What breaks when data written with ``writer`` is read with this schema.
        ``reader_role``/``writer_role`` fill Confluent's "in the new/old schema" wording:
        the defaults fit a BACKWARD check, where the new schema reads."""
        if not isinstance(writer, ProtobufSchema):
            return ["Incompatible because of different schema type"]
        return [
            d.message(reader_role, writer_role)
            for d in differences(writer, self, strict=strict)
            if not d.compatible
        ]

    def validate(self, value: Any) -> None:
        """Whether ``value`` is the JSON form (protobuf's JSON mapping) of the first
        message."""
        self._message_of(value, None)

    # ---- messages for the Spark source and sink

    @property
    def pool(self) -> DescriptorPool:
        with self._pool_lock:
            if self._pool is None:
                pool = DescriptorPool()
                for f in self.file_set.file:
                    pool.Add(f)
                self._pool = pool
            return self._pool

    def first_message_name(self) -> str:
        msgs = _messages(self.file)
        if not msgs:
            raise SchemaError("the schema declares no message")
        return _qualify(self.file.package, msgs[0].name)

    def message_class(self, name: str | None = None) -> type[Message]:
        full = name or self.first_message_name()
        try:
            desc = self.pool.FindMessageTypeByName(full)
        except KeyError as e:
            raise SchemaError(f"no message {full!r} in the schema") from e
        return message_factory.GetMessageClass(desc)

    def encode(self, value: dict[str, Any], name: str | None = None) -> bytes:
        """The message's bytes, without Confluent's framing; ValueMismatch if the value
        does not fit."""
        return self._message_of(value, name).SerializeToString()

    def _message_of(self, value: Any, name: str | None) -> Message:
        msg = self.message_class(name)()
        if not isinstance(value, dict):
            raise ValueMismatch(
                f"a {msg.DESCRIPTOR.full_name} is a JSON object, not {type(value).__name__}"
            )
        try:
            json_format.ParseDict(value, msg)
        except json_format.ParseError as e:
            raise ValueMismatch(str(e)) from e
        except (TypeError, ValueError, AttributeError) as e:
            # json_format lets some malformed values through as plain Python errors.
            raise ValueMismatch(f"{type(e).__name__}: {e}") from e
        return msg

    def decode(self, payload: bytes, name: str | None = None) -> dict[str, Any]:
        msg = self.message_class(name)()
        try:
            msg.ParseFromString(payload)
        except DecodeError as e:
            raise ValueMismatch(f"not a {msg.DESCRIPTOR.full_name}: {e}") from e
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    def message_name(self, indexes: list[int]) -> str:
        """The full name of the message at Confluent's message-index path ([] and [0] are
        the first message; [1, 0] the first nested message of the second one).

        Indexes count declared messages only, as the registry and the Java serializer do.
        confluent-kafka's Python serializer also counts the entries protoc generates for
        map fields, so for a nested message declared after a map field of its parent the
        two disagree; this follows the registry."""
        path = list(indexes) or [0]
        types = _messages(self.file)
        names: list[str] = []
        for i in path:
            if not 0 <= i < len(types):
                raise SchemaError(f"invalid message indexes {list(indexes)}")
            names.append(types[i].name)
            types = _messages(types[i])
        return _qualify(self.file.package, ".".join(names))

    def message_indexes(self, name: str) -> list[int]:
        """The inverse of message_name."""
        prefix = f"{self.file.package}." if self.file.package else ""
        if not name.startswith(prefix):
            raise SchemaError(f"no message {name!r} in the schema")
        out: list[int] = []
        container: Any = self.file
        for part in name[len(prefix) :].split("."):
            names = [m.name for m in _messages(container)]
            if part not in names:
                raise SchemaError(f"no message {name!r} in the schema")
            out.append(names.index(part))
            container = _messages(container)[out[-1]]
        return out

    # ---- lookups the diff and the printer share

    def type_of(
        self, type_name: str
    ) -> descriptor_pb2.DescriptorProto | descriptor_pb2.EnumDescriptorProto | None:
        return self._types.get(type_name.lstrip("."))

    def local_name(self, type_name: str) -> str:
        full = type_name.lstrip(".")
        pkg = self._type_package.get(full, "")
        return full[len(pkg) + 1 :] if pkg and full.startswith(pkg + ".") else full

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.canonical()!r})"


def _qualify(package: str, name: str) -> str:
    return f"{package}.{name}" if package else name


def _index_types(
    f: descriptor_pb2.FileDescriptorProto,
    types: dict[str, Any],
    packages: dict[str, str],
) -> None:
    def walk(prefix: str, msgs: Iterable[Any], enums: Iterable[Any]) -> None:
        for e in enums:
            types[_qualify(prefix, e.name)] = e
            packages[_qualify(prefix, e.name)] = f.package
        for m in msgs:
            full = _qualify(prefix, m.name)
            types[full] = m
            packages[full] = f.package
            walk(full, m.nested_type, m.enum_type)

    walk(f.package, f.message_type, f.enum_type)


# --------------------------------------------------------------------------- differences

COMPATIBLE_CHANGES = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)

# Confluent's wording; the first %s is the reader's role, the second the writer's.
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the {r} schema does not match the package "
    "in the {w} schema",
    "MESSAGE_REMOVED": "The {r} schema is missing a MESSAGE type at path '{p}' in the {w} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the {r} schema does not match "
    "the {w} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the {r} schema "
    "does not match its kind in the {w} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the {r} schema "
    "does not match its type in the {w} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the {r} "
    "schema does not match its label in the {w} schema",
    "REQUIRED_FIELD_ADDED": "A required field at path '{p}' in the {r} schema is missing in "
    "the {w} schema",
    "REQUIRED_FIELD_REMOVED": "The {r} schema is missing a required field at path: '{p}' in "
    "the {w} schema",
    "ONEOF_FIELD_REMOVED": "The {r} schema is missing a oneof field at path '{p}' in the {w} "
    "schema",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": "The oneof field at path '{p}' in the {w} schema was "
    "moved out of its oneof to a top-level field in the {r} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the {r} "
    "schema are outside a oneof in the {w} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the {r} schema is "
    "outside an existing oneof in the {w} schema",
    "SYNTAX_VERSION_CHANGED": "The syntax at '{p}' in the {r} schema does not match the "
    "syntax in the {w} schema",
    "RESERVED_FIELD_REUSED": "A field at path '{p}' in the {r} schema uses a number or name "
    "reserved in the {w} schema",
}


@dataclass(frozen=True)
class Difference:
    type: str
    path: str
    info: str = ""

    @property
    def compatible(self) -> bool:
        return self.type in COMPATIBLE_CHANGES

    def message(self, reader_role: str = "new", writer_role: str = "old") -> str:
        template = _DESCRIPTIONS.get(self.type, "A change of type {t} at path '{p}'")
        text = template.format(p=self.path, r=reader_role, w=writer_role, t=self.type)
        info = self.info or self.path
        return f"{{errorType:'{self.type}', description:'{text}', additionalInfo:'{info}'}}"


_SCALAR_GROUPS: dict[int, str] = {
    FDP.TYPE_INT32: "GENERAL_NUMBER",
    FDP.TYPE_INT64: "GENERAL_NUMBER",
    FDP.TYPE_UINT32: "GENERAL_NUMBER",
    FDP.TYPE_UINT64: "GENERAL_NUMBER",
    FDP.TYPE_BOOL: "GENERAL_NUMBER",
    FDP.TYPE_ENUM: "GENERAL_NUMBER",
    FDP.TYPE_SINT32: "SIGNED_NUMBER",
    FDP.TYPE_SINT64: "SIGNED_NUMBER",
    FDP.TYPE_STRING: "STRING_OR_BYTES",
    FDP.TYPE_BYTES: "STRING_OR_BYTES",
    FDP.TYPE_FIXED32: "FIXED32",
    FDP.TYPE_SFIXED32: "FIXED32",
    FDP.TYPE_FIXED64: "FIXED64",
    FDP.TYPE_SFIXED64: "FIXED64",
    FDP.TYPE_FLOAT: "FLOAT",
    FDP.TYPE_DOUBLE: "DOUBLE",
}

_TYPE_NAMES = {
    v: k.removeprefix("TYPE_").lower() for k, v in FDP.Type.items() if k.startswith("TYPE_")
}


def differences(
    writer: ProtobufSchema, reader: ProtobufSchema, *, strict: bool = False
) -> list[Difference]:
    """Every difference, compatible or not, from the ``writer`` schema (Confluent's
    "original") to the ``reader`` ("update"), in a stable order."""
    diff = _Diff(writer, reader, strict)
    if writer.file.package != reader.file.package:
        diff.add("PACKAGE_CHANGED", [], f"{writer.file.package!r} -> {reader.file.package!r}")
    if strict and _syntax(writer.file) != _syntax(reader.file):
        diff.add("SYNTAX_VERSION_CHANGED", [], f"{_syntax(writer.file)} -> {_syntax(reader.file)}")
    diff.types(writer.file, reader.file, [], (writer.file.package, reader.file.package))
    seen: set[tuple[str, str]] = set()
    out: list[Difference] = []
    for d in diff.out:
        if (d.type, d.path) not in seen:
            seen.add((d.type, d.path))
            out.append(d)
    return out


def _syntax(f: descriptor_pb2.FileDescriptorProto) -> str:
    return f.syntax or "proto2"


def _path(parts: list[str]) -> str:
    return "#/" + "/".join(parts)


class _Diff:
    def __init__(self, old: ProtobufSchema, new: ProtobufSchema, strict: bool) -> None:
        self.old = old
        self.new = new
        self.strict = strict
        self.out: list[Difference] = []
        # Messages by (old full name, new full name): those being compared (a message
        # that contains itself is compared once) and those compared already.
        self._in_progress: set[tuple[str, str]] = set()
        self._memo: dict[tuple[str, str], list[Difference]] = {}

    def add(self, kind: str, path: list[str], info: str = "") -> None:
        self.out.append(Difference(kind, _path(path), info))

    def types(self, old: Any, new: Any, path: list[str], scope: tuple[str, str]) -> None:
        """Compare the messages and enums ``old`` and ``new`` declare by name; ``scope``
        is their full names (or packages, for files)."""
        old_msgs = {m.name: (i, m) for i, m in enumerate(_messages(old))}
        new_msgs = {m.name: (i, m) for i, m in enumerate(_messages(new))}
        for name in sorted(old_msgs.keys() | new_msgs.keys()):
            here = [*path, name]
            if name not in new_msgs:
                self.add("MESSAGE_REMOVED", here, _dotted(here))
            elif name not in old_msgs:
                self.add("MESSAGE_ADDED", here)
            else:
                (oi, om), (ni, nm) = old_msgs[name], new_msgs[name]
                self.message(om, nm, here, (_qualify(scope[0], name), _qualify(scope[1], name)))
                if oi != ni:
                    self.add("MESSAGE_MOVED", here)
        old_enums = {e.name: e for e in old.enum_type}
        new_enums = {e.name: e for e in new.enum_type}
        for name in sorted(old_enums.keys() | new_enums.keys()):
            here = [*path, name]
            if name not in new_enums:
                self.add("ENUM_REMOVED", here)
            elif name not in old_enums:
                self.add("ENUM_ADDED", here)
            else:
                self.enum(old_enums[name], new_enums[name], here)

    def enum(self, old: Any, new: Any, path: list[str]) -> None:
        # Aliases share a number; the last one wins, as in a map by number.
        o = {v.number: v.name for v in old.value}
        n = {v.number: v.name for v in new.value}
        for num in sorted(o.keys() | n.keys()):
            here = [*path, str(num)]
            if num not in n:
                self.add("ENUM_CONST_REMOVED", here)
            elif num not in o:
                self.add("ENUM_CONST_ADDED", here)
            elif o[num] != n[num]:
                self.add("ENUM_CONST_CHANGED", here)

    def message(self, old: Any, new: Any, path: list[str], key: tuple[str, str]) -> None:
        if key not in self._in_progress:
            self._in_progress.add(key)
            try:
                self._fields(old, new, path)
            finally:
                self._in_progress.discard(key)
        self.types(old, new, path, key)

    def _fields(self, old: Any, new: Any, path: list[str]) -> None:
        old_by, old_oneof = _fields_by_number(old)
        new_by, new_oneof = _fields_by_number(new)
        old_oneofs = _real_oneofs(old)
        new_oneofs = _real_oneofs(new)

        deleted_oneofs = {
            name
            for name, members in old_oneofs.items()
            if name not in new_oneofs and not any(n in new_by for n in members)
        }
        for name, members in new_oneofs.items():
            groups: set[str] = set()
            moved_in = 0
            for num in members:
                if num in old_oneof:
                    groups.add("oneof:" + old_oneof[num])
                elif num in old_by:
                    groups.add(f"field:{num}")
                    moved_in += 1
            if len(groups) > 1:
                kind = (
                    "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
                    if moved_in > 1
                    else "FIELD_MOVED_TO_EXISTING_ONEOF"
                )
                self.add(kind, [*path, name], f"oneof {name}")
        for name in sorted(old_oneofs.keys() | new_oneofs.keys()):
            if name not in new_oneofs:
                self.add("ONEOF_REMOVED", [*path, name])
            elif name not in old_oneofs:
                self.add("ONEOF_ADDED", [*path, name])

        if self.strict:
            reserved_names = set(old.reserved_name)
            for num, f in sorted(new_by.items()):
                in_range = any(r.start <= num < r.end for r in old.reserved_range)
                if in_range or f.name in reserved_names:
                    self.add("RESERVED_FIELD_REUSED", [*path, str(num)], f"field {f.name}")

        for num in sorted(old_by.keys() | new_by.keys()):
            of, nf = old_by.get(num), new_by.get(num)
            o_oneof, n_oneof = old_oneof.get(num), new_oneof.get(num)
            if nf is None:
                assert of is not None
                info = f"field {of.name} (number {num})"
                if o_oneof is not None:
                    if o_oneof not in deleted_oneofs:
                        self.add("ONEOF_FIELD_REMOVED", [*path, o_oneof, str(num)], info)
                elif of.label == FDP.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_REMOVED", [*path, str(num)], info)
                else:
                    self.add("FIELD_REMOVED", [*path, str(num)], info)
            elif of is None:
                info = f"field {nf.name} (number {num})"
                if n_oneof is not None:
                    self.add("ONEOF_FIELD_ADDED", [*path, n_oneof, str(num)], info)
                elif nf.label == FDP.LABEL_REQUIRED:
                    self.add("REQUIRED_FIELD_ADDED", [*path, str(num)], info)
                else:
                    self.add("FIELD_ADDED", [*path, str(num)], info)
            else:
                if o_oneof is not None and n_oneof is None:
                    self.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", [*path, str(num)])
                here = [*path, n_oneof, str(num)] if n_oneof is not None else [*path, str(num)]
                self.field(of, nf, here, o_oneof is not None, n_oneof is not None)

    def field(self, of: Any, nf: Any, path: list[str], o_in_oneof: bool, n_in_oneof: bool) -> None:
        if of.name != nf.name:
            self.add("FIELD_NAME_CHANGED", path, f"{of.name} -> {nf.name}")
        o_label = self._label(self.old, of, o_in_oneof)
        n_label = self._label(self.new, nf, n_in_oneof)
        self.typed(of, nf, o_label, n_label, path)

    def _label(self, schema: ProtobufSchema, f: Any, in_oneof: bool) -> int | None:
        """The label as Confluent's parser sees it: none for oneof members and for proto3
        fields written without one (unless strict, which treats those as optional)."""
        if in_oneof:
            return None
        if (
            not self.strict
            and _syntax(schema.file) == "proto3"
            and f.label == FDP.LABEL_OPTIONAL
            and not f.proto3_optional
        ):
            return None
        return int(f.label)

    def typed(self, of: Any, nf: Any, o_label: Any, n_label: Any, path: list[str]) -> None:
        o_kind = self._kind(self.old, of)
        n_kind = self._kind(self.new, nf)
        info = f"{_describe(self.old, of)} -> {_describe(self.new, nf)}"
        if o_kind != n_kind:
            self.add("FIELD_KIND_CHANGED", path, info)
        elif o_kind == "MAP":
            ok, ov = _map_kv(self.old, of)
            nk, nv = _map_kv(self.new, nf)
            self.typed(ok, nk, None, None, path)
            self.typed(ov, nv, None, None, path)
        elif o_kind == "SCALAR":
            og, ng = _SCALAR_GROUPS[of.type], _SCALAR_GROUPS[nf.type]
            if og != ng:
                self.add("FIELD_SCALAR_KIND_CHANGED", path, info)
            elif o_label is not None and n_label is not None and o_label != n_label:
                if og == "STRING_OR_BYTES":
                    self.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED", path, info)
                else:
                    self.add("FIELD_NUMERIC_LABEL_CHANGED", path, info)
        else:
            self.named(of.type_name, nf.type_name, path, info)

    def named(self, o_type: str, n_type: str, path: list[str], info: str) -> None:
        o_local, n_local = self.old.local_name(o_type), self.new.local_name(n_type)
        if o_local != n_local:
            self.add("FIELD_NAMED_TYPE_CHANGED", path, info)
            return
        om, nm = self.old.type_of(o_type), self.new.type_of(n_type)
        key = (o_type.lstrip("."), n_type.lstrip("."))
        if om is None or nm is None or key in self._in_progress:
            return
        found = self._memo.get(key)
        if found is None:
            sub = _Diff(self.old, self.new, self.strict)
            sub._in_progress = self._in_progress
            sub._memo = self._memo
            sub.message(om, nm, o_local.split("."), key)
            found = self._memo[key] = sub.out
        self.out.extend(found)
        if any(not d.compatible for d in found):
            self.add("FIELD_NAMED_TYPE_CHANGED", path, info)

    def _kind(self, schema: ProtobufSchema, f: Any) -> str:
        if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_GROUP):
            t = schema.type_of(f.type_name)
            if isinstance(t, descriptor_pb2.DescriptorProto) and _is_map_entry(t):
                return "MAP"
            return "MESSAGE"
        return "SCALAR"


def _dotted(parts: list[str]) -> str:
    return ".".join(parts)


def _map_kv(schema: ProtobufSchema, f: Any) -> tuple[Any, Any]:
    entry = schema.type_of(f.type_name)
    assert isinstance(entry, descriptor_pb2.DescriptorProto)
    by_name = {x.name: x for x in entry.field}
    return by_name["key"], by_name["value"]


def _describe(schema: ProtobufSchema, f: Any) -> str:
    if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM, FDP.TYPE_GROUP):
        t = schema.type_of(f.type_name)
        if isinstance(t, descriptor_pb2.DescriptorProto) and _is_map_entry(t):
            k, v = _map_kv(schema, f)
            return f"map<{_describe(schema, k)}, {_describe(schema, v)}>"
        type_text = f.type_name.lstrip(".")
    else:
        type_text = _TYPE_NAMES[f.type]
    return f"{'repeated ' if f.label == FDP.LABEL_REPEATED else ''}{type_text}"


def _fields_by_number(msg: Any) -> tuple[dict[int, Any], dict[int, str]]:
    by_number = {f.number: f for f in msg.field}
    in_oneof: dict[int, str] = {}
    for f in msg.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            in_oneof[f.number] = msg.oneof_decl[f.oneof_index].name
    return by_number, in_oneof


def _real_oneofs(msg: Any) -> dict[str, list[int]]:
    """Declared oneofs by name with their members' numbers, without the synthetic ones
    protoc makes for proto3 ``optional``."""
    out: dict[str, list[int]] = {}
    for f in msg.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            out.setdefault(msg.oneof_decl[f.oneof_index].name, []).append(f.number)
    return out


# --------------------------------------------------------------------------- normal form


_MAX_FIELD = 536870911
_MAX_ENUM = 2147483647


class _Printer:
    """Prints a FileDescriptorProto back as .proto source in the normal form's order."""

    def __init__(self, schema: ProtobufSchema) -> None:
        self.schema = schema
        self.f = schema.file
        self.syntax = _syntax(self.f)
        self._options_cache: dict[str, Callable[[bytes], Message] | None] = {}

    # ---- options

    def _options_message(self, opts: Message) -> Message:
        """The options re-read against the schema's own pool when it defines custom
        options (extensions of descriptor.proto), so those print too."""
        full = opts.DESCRIPTOR.full_name
        if full not in self._options_cache:
            parse: Callable[[bytes], Message] | None = None
            if any(f.name == "google/protobuf/descriptor.proto" for f in self.schema.file_set.file):
                try:
                    cls = self.schema.message_class(full)
                    parse = cls.FromString
                except SchemaError:
                    parse = None
            self._options_cache[full] = parse
        parse = self._options_cache[full]
        return parse(opts.SerializeToString()) if parse is not None else opts

    def options(self, opts: Message, skip: Iterable[str] = ()) -> list[str]:
        """Each option as ``name = value``, sorted by name."""
        if not opts.ByteSize():
            return []
        msg = self._options_message(opts)
        out: list[str] = []
        for fd, value in msg.ListFields():
            if fd.name in skip and not fd.is_extension:
                continue
            name = f"({fd.full_name})" if fd.is_extension else fd.name
            values = list(value) if _is_repeated(fd) else [value]
            out.extend(f"{name} = {_option_value(fd, v)}" for v in values)
        return sorted(out)

    # ---- file

    def file(self) -> str:
        f = self.f
        lines: list[str] = []
        if self.syntax == "editions":
            lines.append(f'edition = "{_edition(f)}";')
        else:
            lines.append(f'syntax = "{self.syntax}";')
        if f.package:
            lines.append(f"package {f.package};")
        public = set(f.public_dependency)
        weak = set(f.weak_dependency)
        imports = []
        for i, dep in enumerate(f.dependency):
            kind = "public " if i in public else "weak " if i in weak else ""
            imports.append(f'import {kind}"{dep}";')
        lines.extend(sorted(imports))
        lines.extend(f"option {o};" for o in self.options(f.options))
        body: list[str] = []
        for m in f.message_type:
            body.extend(self.message(m, ""))
        for e in f.enum_type:
            body.extend(self.enum(e, ""))
        for s in f.service:
            body.extend(self.service(s))
        body.extend(self.extensions(f.extension, ""))
        return "\n".join(lines + body) + "\n"

    # ---- messages

    def message(self, m: Any, indent: str, group_field: Any = None) -> list[str]:
        inner = indent + "  "
        if group_field is not None:
            head = f"{indent}{self.label(group_field, False)}group {m.name} = "
            head += f"{group_field.number}{self.field_options(group_field)} {{"
        else:
            head = f"{indent}message {m.name} {{"
        lines = [head]
        lines.extend(f"{inner}option {o};" for o in self.options(m.options))
        groups = {
            f.type_name.lstrip(".").rsplit(".", 1)[-1] for f in m.field if f.type == FDP.TYPE_GROUP
        }
        oneof_members: dict[int, list[Any]] = {}
        items: list[tuple[int, list[str]]] = []
        for f in m.field:
            if f.HasField("oneof_index") and not f.proto3_optional:
                oneof_members.setdefault(f.oneof_index, []).append(f)
            else:
                items.append((f.number, self.field(f, m, inner, False)))
        for idx, members in oneof_members.items():
            decl = m.oneof_decl[idx]
            block = [f"{inner}oneof {decl.name} {{"]
            block.extend(f"{inner}  option {o};" for o in self.options(decl.options))
            for f in sorted(members, key=lambda f: f.number):
                block.extend(self.field(f, m, inner + "  ", True))
            block.append(f"{inner}}}")
            items.append((min(f.number for f in members), block))
        for _, block in sorted(items, key=lambda item: item[0]):
            lines.extend(block)
        ranges = []
        for r in m.extension_range:
            ranges.append(_range(r.start, r.end - 1) + self._bracket(self.options(r.options)))
        if ranges:
            lines.append(f"{inner}extensions {', '.join(ranges)};")
        if m.reserved_range:
            ranges = [_range(r.start, r.end - 1) for r in sorted(m.reserved_range, key=_start)]
            lines.append(f"{inner}reserved {', '.join(ranges)};")
        if m.reserved_name:
            lines.append(f"{inner}reserved {self._names(m.reserved_name)};")
        for n in m.nested_type:
            if _is_map_entry(n) or n.name in groups:
                continue
            lines.extend(self.message(n, inner))
        for e in m.enum_type:
            lines.extend(self.enum(e, inner))
        lines.extend(self.extensions(m.extension, inner))
        lines.append(f"{indent}}}")
        return lines

    def _names(self, names: Iterable[str]) -> str:
        # Editions spell reserved names as identifiers, proto2 and proto3 as strings.
        quote = "" if self.syntax == "editions" else '"'
        return ", ".join(f"{quote}{n}{quote}" for n in sorted(names))

    def label(self, f: Any, in_oneof: bool) -> str:
        if in_oneof:
            return ""
        if f.label == FDP.LABEL_REPEATED:
            return "repeated "
        if f.label == FDP.LABEL_REQUIRED:
            return "required "
        if self.syntax == "proto2" or f.proto3_optional:
            return "optional "
        return ""

    def type_text(self, f: Any) -> str:
        if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
            return f.type_name if f.type_name.startswith(".") else "." + f.type_name
        return _TYPE_NAMES[f.type]

    def field(self, f: Any, owner: Any, indent: str, in_oneof: bool) -> list[str]:
        if f.type == FDP.TYPE_GROUP:
            nested = {n.name: n for n in owner.nested_type}
            return self.message(nested[f.type_name.rsplit(".", 1)[-1]], indent, f)
        entry = self.schema.type_of(f.type_name) if f.type == FDP.TYPE_MESSAGE else None
        if isinstance(entry, descriptor_pb2.DescriptorProto) and _is_map_entry(entry):
            by_name = {x.name: x for x in entry.field}
            k, v = self.type_text(by_name["key"]), self.type_text(by_name["value"])
            return [f"{indent}map<{k}, {v}> {f.name} = {f.number}{self.field_options(f)};"]
        head = f"{self.label(f, in_oneof)}{self.type_text(f)} {f.name} = {f.number}"
        return [f"{indent}{head}{self.field_options(f)};"]

    def field_options(self, f: Any) -> str:
        opts = self.options(f.options)
        if f.HasField("default_value"):
            opts.append(f"default = {self._default(f)}")
        if f.HasField("json_name") and f.json_name != _json_name(f.name):
            opts.append(f'json_name = "{text_encoding.CEscape(f.json_name, True)}"')
        return self._bracket(sorted(opts))

    @staticmethod
    def _bracket(opts: list[str]) -> str:
        return f" [{', '.join(opts)}]" if opts else ""

    @staticmethod
    def _default(f: Any) -> str:
        if f.type == FDP.TYPE_STRING:
            return f'"{text_encoding.CEscape(f.default_value, True)}"'
        if f.type == FDP.TYPE_BYTES:
            return f'"{f.default_value}"'  # already C-escaped by protoc
        return f.default_value

    def enum(self, e: Any, indent: str) -> list[str]:
        inner = indent + "  "
        lines = [f"{indent}enum {e.name} {{"]
        lines.extend(f"{inner}option {o};" for o in self.options(e.options))
        # The first value is the default of a field without one, so it stays first.
        values = [*e.value[:1], *sorted(e.value[1:], key=lambda v: (v.number, v.name))]
        for v in values:
            opts = self._bracket(self.options(v.options))
            lines.append(f"{inner}{v.name} = {v.number}{opts};")
        if e.reserved_range:
            ranges = [
                _range(r.start, r.end, _MAX_ENUM) for r in sorted(e.reserved_range, key=_start)
            ]
            lines.append(f"{inner}reserved {', '.join(ranges)};")
        if e.reserved_name:
            lines.append(f"{inner}reserved {self._names(e.reserved_name)};")
        lines.append(f"{indent}}}")
        return lines

    def service(self, s: Any) -> list[str]:
        lines = [f"service {s.name} {{"]
        lines.extend(f"  option {o};" for o in self.options(s.options))
        for m in s.method:
            cin = "stream " if m.client_streaming else ""
            sout = "stream " if m.server_streaming else ""
            head = f"  rpc {m.name} ({cin}{m.input_type}) returns ({sout}{m.output_type})"
            opts = self.options(m.options)
            if opts:
                lines.append(head + " {")
                lines.extend(f"    option {o};" for o in opts)
                lines.append("  }")
            else:
                lines.append(head + ";")
        lines.append("}")
        return lines

    def extensions(self, fields: Iterable[Any], indent: str) -> list[str]:
        by_extendee: dict[str, list[Any]] = {}
        for f in fields:
            by_extendee.setdefault(f.extendee, []).append(f)
        lines: list[str] = []
        for extendee in sorted(by_extendee):
            lines.append(f"{indent}extend {extendee} {{")
            for f in sorted(by_extendee[extendee], key=lambda f: f.number):
                lines.extend(self.field(f, self.f, indent + "  ", False))
            lines.append(f"{indent}}}")
        return lines


def _start(r: Any) -> int:
    return int(r.start)


def _range(start: int, end: int, top: int = _MAX_FIELD) -> str:
    """A range with its end included, as .proto spells it."""
    if start == end:
        return str(start)
    return f"{start} to {'max' if end >= top else end}"


def _edition(f: descriptor_pb2.FileDescriptorProto) -> str:
    name = descriptor_pb2.Edition.Name(f.edition)
    return name.removeprefix("EDITION_")


def _json_name(name: str) -> str:
    out: list[str] = []
    upper = False
    for ch in name:
        if ch == "_":
            upper = True
        elif upper:
            out.append(ch.upper())
            upper = False
        else:
            out.append(ch)
    return "".join(out)


def _is_repeated(fd: FieldDescriptor) -> bool:
    return bool(fd.is_repeated)


def _option_value(fd: FieldDescriptor, value: Any) -> str:
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type == FieldDescriptor.TYPE_ENUM:
        ev = fd.enum_type.values_by_number.get(value)
        return ev.name if ev is not None else str(value)
    if fd.type == FieldDescriptor.TYPE_STRING:
        return f'"{text_encoding.CEscape(value, True)}"'
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return f'"{text_encoding.CEscape(value, False)}"'
    if fd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return "{ " + text_format.MessageToString(value, as_one_line=True) + " }"
    if fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(float(value))
    return str(value)
