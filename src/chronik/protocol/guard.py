# Bounds every length in a request body before kio decodes it.
#
# kio's native reader reserves room for an array from the count on the wire before it
# reads a single element, so a compact array length written as a 5-byte uvarint (up to
# 2^35) or a legacy int32 one makes it ask for gigabytes and abort the whole process.
# `check` walks the body the way the request schema lays it out and raises
# MalformedRequest, which closes the connection, unless every length fits in the bytes
# that are left. The wire format it walks (Kafka's, per field of a kio dataclass):
#
#   int8/bool 1, int16/uint16 2, int32/uint32 4, int64/float64 8, uuid 16 bytes
#   legacy (non-flexible) versions:
#     string   int16 length, -1 = null        bytes/records  int32 length, -1 = null
#     array    int32 count, -1 = null
#   flexible versions:
#     string, bytes, records, array   uvarint length + 1, 0 = null
#     each struct ends with tagged fields: uvarint count, then per field uvarint tag,
#     uvarint size and `size` bytes holding the field's value
#   nullable struct (not an array element): int8 presence marker, negative = null
#
# Null where the schema does not allow it is refused here too, as Kafka's own parser
# refuses it ("non-nullable field ... was serialized as null"): kio reads a null into a
# non-nullable array as None, which a handler would only trip over later.
#
# Each request class gets one walker, generated as Python source from its dataclass
# metadata (`kafka_type`, `tag`, `__flexible__`, `X | None`) on first use and cached.
# Runs of fixed-width fields become one addition, and an array of fixed-width elements
# one multiplication, so the walk costs little next to kio's own decode.
from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from chronik.protocol.framing import MalformedRequest

FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
VARIABLE = {"string", "bytes", "records"}

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from

Walker = Callable[[bytes, int, int], int]


def check(cls: type, buf: bytes, offset: int) -> None:
    """Raise MalformedRequest unless the body of `buf` from `offset` fits `cls`."""
    end = len(buf)
    try:
        pos = walker(cls)(buf, offset, end)
    except (IndexError, struct.error):
        pos = end + 1
    if pos > end:
        raise MalformedRequest(f"{cls.__name__}: request ends inside a field")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    # Kafka reads at most 5 bytes; anything longer is not a varint it would accept.
    result = 0
    for shift in (0, 7, 14, 21, 28):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise MalformedRequest("varint longer than 5 bytes")


def _past_end(path: str, length: int) -> MalformedRequest:
    return MalformedRequest(f"{path}: length {length} runs past the end of the request")


def _too_many(path: str, count: int, left: int) -> MalformedRequest:
    return MalformedRequest(f"{path}: array of {count} cannot fit in the {left} bytes left")


def _null(path: str) -> MalformedRequest:
    return MalformedRequest(f"non-nullable field {path} was serialized as null")


def _bad_length(path: str, length: int) -> MalformedRequest:
    return MalformedRequest(f"{path}: negative length {length}")


def _tags(buf: bytes, pos: int, end: int, known: dict[int, Walker], path: str) -> int:
    count, pos = _uvarint(buf, pos)
    if count > end - pos:
        raise _too_many(f"{path} tagged fields", count, end - pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise _past_end(f"{path} tagged field {tag}", size)
        walk = known.get(tag)
        if walk is None:
            raise MalformedRequest(f"{path}: unknown tagged field {tag}")
        # kio reads a known tag's value by its own length and ignores `size`, so the
        # two must agree or kio's position would drift from the one checked here.
        if walk(buf, pos, end) != stop:
            raise MalformedRequest(f"{path} tagged field {tag}: size {size} does not match")
        pos = stop
    return pos


@dataclasses.dataclass(frozen=True)
class _Shape:
    kind: str  # a FIXED/VARIABLE kafka type, or "struct"
    array: bool
    nullable: bool  # the field itself (the array, when an array)
    item_nullable: bool
    struct: type | None


def _optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp):
        rest = [a for a in get_args(tp) if a is not NoneType]
        return rest[0], True
    return tp, False


def _shape(field: dataclasses.Field[Any]) -> _Shape:
    tp, nullable = _optional(field.type)
    array = get_origin(tp) is tuple
    item, item_nullable = _optional(get_args(tp)[0]) if array else (tp, False)
    if dataclasses.is_dataclass(item):
        return _Shape("struct", array, nullable, item_nullable, item)  # type: ignore[arg-type]
    kind = field.metadata.get("kafka_type")
    if kind not in FIXED and kind not in VARIABLE:
        raise TypeError(f"no wire layout for {field.name} of kafka type {kind!r}")
    if kind == "uuid":
        # kio reads the all-zero uuid as None; on the wire it is 16 bytes like any other.
        nullable = item_nullable = False
    return _Shape(kind, array, nullable, item_nullable, None)


class _Compiler:
    """Generates the walker of one request class as Python source.

    Nested structs are written out inline, loops included, rather than called:
    a call per array item would cost more than the walk itself. Reusing the names
    `n` and `count` at every level is safe: a loop's range is fixed when it starts.
    """

    def __init__(self) -> None:
        self.layouts: dict[type, tuple[int, int | None]] = {}
        self.tables: dict[type, str] = {}
        self.env: dict[str, Any] = {
            "_uvarint": _uvarint,
            "_tags": _tags,
            "_I16": _I16,
            "_I32": _I32,
            "_past_end": _past_end,
            "_too_many": _too_many,
            "_null": _null,
            "_bad_length": _bad_length,
        }
        self.counter = 0

    def layout(self, cls: type) -> tuple[int, int | None]:
        """(fewest bytes a `cls` can take, its size if every one takes that many)."""
        if cls not in self.layouts:
            flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
            least, fixed_only = 1 if flexible else 0, not flexible
            for field in dataclasses.fields(cls):
                if "tag" in field.metadata:
                    continue
                shape = _shape(field)
                size = self._fixed_size(shape)
                if size is not None:
                    least += size
                    continue
                fixed_only = False
                if shape.array or shape.kind == "bytes" or shape.kind == "records":
                    least += 1 if flexible else 4
                elif shape.kind == "string":
                    least += 1 if flexible else 2
                elif shape.nullable:
                    least += 1  # the presence marker
                else:
                    assert shape.struct is not None
                    least += self.layout(shape.struct)[0]
            self.layouts[cls] = (least, least if fixed_only else None)
        return self.layouts[cls]

    def _fixed_size(self, shape: _Shape) -> int | None:
        if shape.array:
            return None
        if shape.kind in FIXED:
            return FIXED[shape.kind]
        if shape.kind == "struct" and not shape.nullable:
            assert shape.struct is not None
            return self.layout(shape.struct)[1]
        return None

    def body(self, cls: type) -> list[str]:
        flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
        lines: list[str] = []
        pending = 0
        tagged: list[tuple[int, dataclasses.Field[Any]]] = []
        for field in dataclasses.fields(cls):
            if "tag" in field.metadata:
                tagged.append((int(field.metadata["tag"]), field))
                continue
            shape = _shape(field)
            size = self._fixed_size(shape)
            if size is not None:
                pending += size
                continue
            if pending:
                lines.append(f"pos += {pending}")
                pending = 0
            lines.extend(self._field(shape, flexible, f"{cls.__name__}.{field.name}"))
        if pending:
            lines.append(f"pos += {pending}")
        if flexible:
            lines.extend(self._tag_section(cls, tagged))
        return lines

    def _field(self, shape: _Shape, flexible: bool, path: str) -> list[str]:
        if not shape.array:
            return self._single(shape.kind, shape.struct, shape.nullable, flexible, path)
        lines = self._length("count", flexible, shape.nullable, path, array=True)
        item_lines, item_min, item_fixed = self._item(shape, flexible, f"{path}[]")
        check = [
            f"if count * {max(item_min, 1)} > end - pos:",
            f"    raise _too_many({path!r}, count, end - pos)",
        ]
        if item_fixed is not None:
            step = check + ([f"pos += count * {item_fixed}"] if item_fixed else [])
        else:
            step = [*check, "for _ in range(count):", *("    " + x for x in item_lines)]
        if shape.nullable:
            lines.append("if count >= 0:")
            lines.extend("    " + x for x in step)
        else:
            lines.extend(step)
        return lines

    def _item(self, shape: _Shape, flexible: bool, path: str) -> tuple[list[str], int, int | None]:
        if shape.kind in FIXED:
            size = FIXED[shape.kind]
            return [], size, size
        if shape.kind == "struct":
            assert shape.struct is not None
            least, fixed = self.layout(shape.struct)
            return self.body(shape.struct), least, fixed
        lines = self._single(shape.kind, None, shape.item_nullable, flexible, path)
        return lines, (1 if flexible else 2 if shape.kind == "string" else 4), None

    def _single(
        self, kind: str, struct_cls: type | None, nullable: bool, flexible: bool, path: str
    ) -> list[str]:
        if kind == "struct":
            assert struct_cls is not None
            if not nullable:
                return self.body(struct_cls)
            inner = self.body(struct_cls)
            return ["marker = buf[pos]", "pos += 1", "if marker < 128:"] + [
                "    " + x for x in inner or ["pass"]
            ]
        wide = 2 if kind == "string" else 4
        lines = self._length("n", flexible, nullable, path, array=False, wide=wide)
        lines += [
            "pos += n",
            "if pos > end:",
            f"    raise _past_end({path!r}, n)",
        ]
        return lines

    def _length(
        self, var: str, flexible: bool, nullable: bool, path: str, array: bool, wide: int = 4
    ) -> list[str]:
        """Read a length into `var`: -1 for null, else the count of bytes or items."""
        if flexible:
            lines = [
                f"{var} = buf[pos]",
                f"if {var} < 128:",
                "    pos += 1",
                "else:",
                f"    {var}, pos = _uvarint(buf, pos)",
                f"{var} -= 1",
            ]
        else:
            reader = "_I16" if wide == 2 and not array else "_I32"
            size = 2 if reader == "_I16" else 4
            lines = [
                f"{var} = {reader}(buf, pos)[0]",
                f"pos += {size}",
                f"if {var} < -1:",
                f"    raise _bad_length({path!r}, {var})",
            ]
        if not nullable:
            lines += [f"if {var} == -1:", f"    raise _null({path!r})"]
        elif not array:
            lines += [f"if {var} == -1:", f"    {var} = 0"]
        return lines

    def _tag_section(
        self, cls: type, tagged: list[tuple[int, dataclasses.Field[Any]]]
    ) -> list[str]:
        table = self.tables.get(cls)
        if table is None:
            self.counter += 1
            table = self.tables[cls] = f"_tags_{self.counter}_{cls.__name__}"
            self.env[table] = {tag: self._tag_walker(cls, field) for tag, field in tagged}
        return [
            "if buf[pos] == 0:",
            "    pos += 1",
            "else:",
            f"    pos = _tags(buf, pos, end, {table}, {cls.__name__!r})",
        ]

    def _tag_walker(self, cls: type, field: dataclasses.Field[Any]) -> Walker:
        shape = _shape(field)
        size = self._fixed_size(shape)
        if size is not None:
            body = [f"pos += {size}"]
        else:
            body = self._field(shape, True, f"{cls.__name__}.{field.name}")
        self.counter += 1
        return self.define(f"_tag_{self.counter}_{cls.__name__}_{field.name}", body)

    def define(self, name: str, body: list[str]) -> Walker:
        exec(self.source(name, body), self.env)  # noqa: S102 - generated from the schema
        return self.env[name]  # type: ignore[no-any-return]

    @staticmethod
    def source(name: str, body: list[str]) -> str:
        lines = [f"def {name}(buf, pos, end):", *("    " + x for x in body), "    return pos"]
        return "\n".join(lines) + "\n"


@cache
def walker(cls: type) -> Walker:
    """The body walker of a request class: (buf, pos, end) -> pos after the body."""
    compiler = _Compiler()
    return compiler.define(f"_walk_{cls.__name__}", compiler.body(cls))


def source(cls: type) -> str:
    """The generated walker source of `cls`, for reading when a walk surprises."""
    compiler = _Compiler()
    return compiler.source(f"_walk_{cls.__name__}", compiler.body(cls))
