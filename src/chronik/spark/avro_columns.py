# Avro records of one writer schema decoded straight into Arrow columns, compiled with numba.
#
# The fast path of valueFormat=avro for the common shape: a record whose fields are, at any
# depth of nested records, null, boolean, int, long, float, double, string, bytes, an enum,
# date / timestamp-millis / timestamp-micros, or a union of null and one of these. Each is a
# "slot" of a program; the compiled loop walks every record's Avro binary once:
#   boolean    one byte
#   int, long  zig-zag varint (so is an enum's index and a union's branch index)
#   float      4 bytes little-endian, double 8 (only their positions are kept here)
#   string, bytes  varint length, then the bytes (position and length kept)
# and says per record whether it read exactly the record's bytes. Columns are then cut out
# of the buffer with numpy and record_decode.gather: no Python object per record.
# Anything else (arrays, maps, other unions, a reader that is not the writer plus fields with
# plain defaults, a record that does not read whole) is left to the per-record decoder.
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from chronik.spark.record_decode import _compiled, _varint, gather

BOOLEAN, INTEGER, FLOAT, DOUBLE, BYTES, ENUM, NULL = 1, 2, 3, 4, 5, 6, 7
_KINDS = {
    "boolean": BOOLEAN,
    "int": INTEGER,
    "long": INTEGER,
    "float": FLOAT,
    "double": DOUBLE,
    "string": BYTES,
    "bytes": BYTES,
    "null": NULL,
}
_LOGICAL = {("int", "date"), ("long", "timestamp-millis"), ("long", "timestamp-micros")}
_PLAIN_DEFAULTS = ("null", "boolean", "int", "long", "float", "double", "string")


@_compiled
def decode_records(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    kinds: np.ndarray,
    null_branch: np.ndarray,
) -> tuple:
    n = len(starts)
    m = len(kinds)
    vals = np.zeros((n, m), np.int64)
    lens = np.full((n, m), -1, np.int64)
    valid = np.ones((n, m), np.bool_)
    ok = np.ones(n, np.bool_)
    for r in range(n):
        pos = starts[r]
        end = ends[r]
        good = True
        for k in range(m):
            if null_branch[k] >= 0:
                branch, pos = _varint(buf, pos, end)
                if pos < 0 or branch < 0 or branch > 1:
                    good = False
                    break
                if branch == null_branch[k]:
                    valid[r, k] = False
                    continue
            kind = kinds[k]
            if kind == 1:
                if pos >= end or buf[pos] > 1:
                    good = False
                    break
                vals[r, k] = buf[pos]
                pos += 1
            elif kind == 2 or kind == 6:
                value, pos = _varint(buf, pos, end)
                if pos < 0:
                    good = False
                    break
                vals[r, k] = value
            elif kind == 3 or kind == 4:
                size = 4 if kind == 3 else 8
                if pos + size > end:
                    good = False
                    break
                vals[r, k] = pos
                pos += size
            elif kind == 5:
                length, pos = _varint(buf, pos, end)
                if pos < 0 or length < 0 or pos + length > end:
                    good = False
                    break
                vals[r, k] = pos
                lens[r, k] = length
                pos += length
            else:
                valid[r, k] = False
        ok[r] = good and pos == end
    return vals, lens, valid, ok


@dataclass(frozen=True)
class Slot:
    index: int
    kind: int
    logical: str | None
    symbols: tuple[str, ...] = ()


@dataclass(frozen=True)
class Program:
    """A writer schema's slots, and its tree: field name -> Slot or a nested Program's
    tree, with each field's definition (to compare with the reader's)."""

    kinds: np.ndarray
    null_branch: np.ndarray
    tree: dict[str, Any]


def compile_program(writer: Any) -> Program | None:
    """The program of a fastavro-parsed record schema, or None when it has another shape."""
    if not isinstance(writer, dict) or writer.get("type") != "record":
        return None
    named = writer.get("__named_schemas", {})
    kinds: list[int] = []
    nulls: list[int] = []

    def add(kind: int, logical: str | None = None, symbols: tuple[str, ...] = ()) -> Slot:
        kinds.append(kind)
        nulls.append(-1)
        return Slot(len(kinds) - 1, kind, logical, symbols)

    def leaf(node: Any) -> Slot | dict[str, Any] | None:
        if isinstance(node, str) and node in named:
            node = named[node]
        if isinstance(node, str):
            kind = _KINDS.get(node)
            return add(kind) if kind is not None else None
        if isinstance(node, dict):
            kind_name = node.get("type")
            if kind_name == "record":
                return fields(node)
            if kind_name == "enum":
                return add(ENUM, None, tuple(node["symbols"]))
            logical = node.get("logicalType")
            if (kind_name, logical) in _LOGICAL:
                return add(INTEGER, logical)
            if logical is None and isinstance(kind_name, str) and kind_name in _KINDS:
                return leaf(kind_name)
        return None

    def fields(record: dict[str, Any]) -> dict[str, Any] | None:
        tree: dict[str, Any] = {}
        for f in record["fields"]:
            node = f["type"]
            branch = -1
            if isinstance(node, list):
                if len(node) != 2 or "null" not in node or node[0] == node[1]:
                    return None
                branch = node.index("null")
                node = node[1 - branch]
            start = len(kinds)
            found = leaf(node)
            if found is None or (branch >= 0 and not isinstance(found, Slot)):
                return None
            if branch >= 0:
                nulls[start] = branch
            tree[f["name"]] = (found, json.dumps(f["type"], sort_keys=True))
        return tree

    tree = fields(writer)
    if tree is None:
        return None
    return Program(np.array(kinds, np.int64), np.array(nulls, np.int64), tree)


class _Columns:
    def __init__(self, buf: np.ndarray, vals: np.ndarray, lens: np.ndarray, valid: np.ndarray):
        self.buf, self.vals, self.lens, self.valid = buf, vals, lens, valid
        self.n = len(vals)

    def leaf(self, slot: Slot, target: pa.DataType) -> pa.Array:
        k = slot.index
        valid = self.valid[:, k]
        mask = None if valid.all() else ~valid
        vals = self.vals[:, k]
        if slot.kind == BYTES:
            offsets, data = gather(self.buf, vals, np.where(valid, self.lens[:, k], -1))
            nulls = int((~valid).sum())
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
            kind = pa.string() if pa.types.is_string(target) else pa.binary()
            array = pa.Array.from_buffers(
                kind, self.n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls
            )
            if kind == pa.string():
                array.validate(full=True)  # UTF-8
            return array
        if slot.kind in (FLOAT, DOUBLE):
            size, dtype = (4, "<f4") if slot.kind == FLOAT else (8, "<f8")
            if len(self.buf) < size:
                raise ValueError("buffer too small")
            at = np.where(valid, vals, 0)
            raw = self.buf[at[:, None] + np.arange(size)]
            return pa.array(np.ascontiguousarray(raw).view(dtype).ravel(), mask=mask)
        if slot.kind == BOOLEAN:
            return pa.array(vals.astype(np.bool_), mask=mask)
        if slot.kind == ENUM:
            if ((vals < 0) | (vals >= len(slot.symbols)))[valid].any():
                raise ValueError("enum index out of range")
            names = pa.array(slot.symbols, pa.string())
            return names.take(pa.array(np.where(valid, vals, 0), mask=mask))
        if slot.logical == "date":
            return pa.array(vals.astype(np.int32), pa.date32(), mask=mask)
        if slot.logical in ("timestamp-millis", "timestamp-micros"):
            micros = vals * 1000 if slot.logical == "timestamp-millis" else vals
            return pa.array(micros, pa.timestamp("us", tz="UTC"), mask=mask)
        if pa.types.is_int32(target):
            return pa.array(vals.astype(np.int32), mask=mask)
        return pa.array(vals, mask=mask)

    def node(self, found: Slot | dict[str, Any], target: pa.DataType) -> pa.Array:
        if isinstance(found, Slot):
            array = self.leaf(found, target)
            return array if array.type == target else array.cast(target)
        if not pa.types.is_struct(target):
            raise ValueError("a record where the column has no struct")
        children = []
        for field in target:
            entry = found.get(field.name)
            children.append(
                self.node(entry[0], field.type)
                if entry is not None
                else pa.nulls(self.n, field.type)
            )
        return pa.StructArray.from_arrays(children, fields=list(target))


def reader_plan(program: Program, reader: Any) -> dict[str, Any] | None:
    """Reader fields -> ("writer", tree entry) or ("default", value); None unless the reader
    is the writer with fields dropped or added with plain defaults, at the top level."""
    if not isinstance(reader, dict) or reader.get("type") != "record":
        return None
    plan: dict[str, Any] = {}
    for f in reader["fields"]:
        entry = program.tree.get(f["name"])
        if entry is not None:
            if entry[1] != json.dumps(f["type"], sort_keys=True) or "aliases" in f:
                return None
            plan[f["name"]] = ("writer", entry)
            continue
        kind = f["type"][0] if isinstance(f["type"], list) else f["type"]
        if "default" not in f or kind not in _PLAIN_DEFAULTS:
            return None
        plan[f["name"]] = ("default", f["default"])
    return plan


def decode_column(
    program: Program,
    plan: dict[str, Any],
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    target: pa.DataType,
) -> pa.Array | None:
    """The struct column of the records at buf[starts[i]:ends[i]], or None when one of
    them does not read whole (the per-record decoder then says which and why)."""
    vals, lens, valid, ok = decode_records(buf, starts, ends, program.kinds, program.null_branch)
    if not ok.all() or not pa.types.is_struct(target):
        return None
    columns = _Columns(buf, vals, lens, valid)
    n = len(starts)
    children = []
    try:
        for field in target:
            how = plan.get(field.name)
            if how is None:
                children.append(pa.nulls(n, field.type))
            elif how[0] == "writer":
                children.append(columns.node(how[1][0], field.type))
            else:
                children.append(pa.repeat(pa.scalar(how[1], field.type), n))
        return pa.StructArray.from_arrays(children, fields=list(target))
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
