"""Request frames for the fuzzer: plausible requests built from the schemas, then mutated.

A frame is what goes on the wire: int32 size, request header (api_key int16,
api_version int16, correlation_id int32, client_id int16-prefixed string, and a
tagged-field count for flexible versions), then the body. The body is encoded by
walking the same schema kio encodes from (kio's request classes, or the broker's
hand-written legacy ones), so the encoder knows where every length prefix sits:
compact (uvarint, length + 1) and legacy (int32 for arrays and bytes, int16 for
strings), plus tagged-field counts and sizes. `encode` checks its bytes against
kio's own writer, so what is mutated is exactly what a client would have sent.

Values are drawn to reach deep into handlers (existing topic and group names,
partitions 0..2, small arrays, valid record batches), with a share of random and
boundary values. Mutations then truncate, flip bits, overwrite runs, put absurd
values at length positions, lie by a little about lengths, insert and append garbage.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import random
import struct
import uuid
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any

from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_writer

from chronik.protocol import compat
from chronik.protocol.framing import write_uvarint as uvarint
from chronik.records.batch import CRC_START
from chronik.records.builder import Record, build_batch

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
ERROR_CODES = list(ErrorCode)

MUTATIONS = (
    "valid",
    "truncate",
    "bitflip",
    "overwrite",
    "absurd-length",
    "length-lie",
    "insert",
    "append",
)
# Values written over a length prefix, by its encoding.
ABSURD = {
    "uvarint": (0x7FFFFFFF0, 2**32, 0xFFFFFFFF, 2**31, 2**28 + 1, 2**35 - 1),
    "int32": (0x7FFFFFFF, -2, 0x10000000, -(2**31), 0x7FFFFFF0),
    "int16": (0x7FFF, -2, -(2**15), 0x4000),
}


@dataclass
class Pools:
    """Names the broker knows, so generated requests hit real topics, groups and ids."""

    topics: list[str]
    topic_ids: list[uuid.UUID] = field(default_factory=list)
    groups: list[str] = field(default_factory=lambda: ["fuzz-g0", "fuzz-g1"])
    new_topics: list[str] = field(default_factory=lambda: ["fuzz-new-0", "fuzz-new-1"])
    configs: list[str] = field(
        default_factory=lambda: [
            "cleanup.policy",
            "retention.ms",
            "retention.bytes",
            "segment.bytes",
            "max.message.bytes",
            "message.timestamp.type",
            "min.insync.replicas",
            "compression.type",
        ]
    )


@dataclass
class Frame:
    api_key: int
    api_version: int
    mutation: str
    data: bytes  # the whole frame, size prefix included
    note: str = ""


@dataclass
class _Out:
    buf: bytearray = field(default_factory=bytearray)
    lengths: list[tuple[int, str]] = field(default_factory=list)

    def length(self, kind: str, value: int) -> None:
        self.lengths.append((len(self.buf), kind))
        if kind == "uvarint":
            self.buf += uvarint(value)
        elif kind == "int32":
            self.buf += struct.pack(">i", value)
        else:
            self.buf += struct.pack(">h", value)




def _uvarint_size(buf: bytes | bytearray, offset: int) -> int:
    end = offset
    while end < len(buf) and buf[end] & 0x80:
        end += 1
    return end + 1 - offset


# --- encoding, with the positions of length prefixes ------------------------------


def _fields(cls: type) -> tuple[list[dataclasses.Field], list[tuple[int, dataclasses.Field]]]:
    plain, tagged = [], []
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            plain.append(f)
        else:
            tagged.append((int(tag), f))
    return plain, sorted(tagged, key=lambda t: t[0])


def _write_bytes(out: _Out, value: str | bytes | None, flexible: bool, kafka_type: str) -> None:
    data = value.encode() if isinstance(value, str) else value
    if flexible:
        out.length("uvarint", 0 if data is None else len(data) + 1)
    elif kafka_type == "string":
        out.length("int16", -1 if data is None else len(data))
    else:
        out.length("int32", -1 if data is None else len(data))
    if data is not None:
        out.buf += data


def _write_primitive(out: _Out, kafka_type: str, flexible: bool, optional: bool, v: Any) -> None:
    if kafka_type in ("string", "bytes", "records"):
        _write_bytes(out, v, flexible, kafka_type)
        return
    tmp = io.BytesIO()
    get_writer(kafka_type, flexible, optional)(tmp, v)
    out.buf += tmp.getvalue()


def _write_field(out: _Out, f: dataclasses.Field, value: Any, flexible: bool, tag: bool) -> None:
    optional = False if tag else is_optional(f)
    fc = classify_field(f)
    if fc.is_array:
        if flexible:
            out.length("uvarint", 0 if value is None else len(value) + 1)
        else:
            out.length("int32", -1 if value is None else len(value))
        for item in value or ():
            if isinstance(fc, PrimitiveTupleField):
                _write_primitive(out, get_schema_field_type(f), flexible, False, item)
            else:
                _write_entity(out, fc.type_, item)
    elif isinstance(fc, PrimitiveField):
        _write_primitive(out, get_schema_field_type(f), flexible, optional, value)
    else:
        if optional:
            if value is None:
                out.buf += b"\xff"
                return
            out.buf += b"\x01"
        _write_entity(out, fc.type_, value)


def _write_entity(out: _Out, cls: type, entity: Any) -> None:
    plain, tagged = _fields(cls)
    for f in plain:
        _write_field(out, f, getattr(entity, f.name), cls.__flexible__, tag=False)
    if not cls.__flexible__:
        return
    present = []
    for tag, f in tagged:
        v = getattr(entity, f.name)
        default = f.default if f.default is not MISSING else get_tagged_field_default(f)
        if v != default:
            present.append((tag, f, v))
    out.length("uvarint", len(present))
    for tag, f, v in present:
        inner = _Out()
        _write_field(inner, f, v, True, tag=True)
        out.buf += uvarint(tag)
        out.length("uvarint", len(inner.buf))
        base = len(out.buf)
        out.lengths.extend((base + pos, kind) for pos, kind in inner.lengths)
        out.buf += inner.buf


def encode(request: Any, correlation_id: int, client_id: str | None = "fuzz") -> _Out:
    """The whole frame (size prefix included) and the positions of its length prefixes."""
    cls = type(request)
    out = _Out()
    out.buf += struct.pack(">ihhi", 0, cls.__api_key__, cls.__version__, correlation_id)
    _write_bytes(out, client_id, False, "string")
    if cls.__flexible__:
        out.length("uvarint", 0)
    body_at = len(out.buf)
    _write_entity(out, cls, request)
    reference = io.BytesIO()
    entity_writer(cls)(reference, request)
    if bytes(out.buf[body_at:]) != reference.getvalue():
        raise AssertionError(f"encoder disagrees with kio for {cls.__name__} v{cls.__version__}")
    struct.pack_into(">i", out.buf, 0, len(out.buf) - 4)
    return out


# --- values -------------------------------------------------------------------------


class Generator:
    """Plausible requests for any API and version, from one seeded random source."""

    def __init__(self, rnd: random.Random, pools: Pools) -> None:
        self.rnd = rnd
        self.pools = pools

    def request(self, api_key: int, version: int) -> Any:
        return self.entity(compat.request_class(api_key, version), 0)

    def entity(self, cls: type, depth: int) -> Any:
        values = {}
        for f in dataclasses.fields(cls):
            values[f.name] = self.field(cls, f, depth, get_field_tag(f) is not None)
        return cls(**values)

    def field(self, owner: type, f: dataclasses.Field, depth: int, tag: bool) -> Any:
        r = self.rnd
        if tag and r.random() < 0.5 and f.default is not MISSING:
            return f.default
        optional = not tag and is_optional(f)
        fc = classify_field(f)
        if fc.is_array:
            if optional and r.random() < 0.1:
                return None
            n = r.choices((0, 1, 2, 3, 5), (2, 6, 3, 2, 1))[0]
            if depth > 3:
                n = min(n, 1)
            if isinstance(fc, PrimitiveTupleField):
                kafka_type = get_schema_field_type(f)
                return tuple(self.primitive(owner, f.name, kafka_type, False) for _ in range(n))
            return tuple(self.entity(fc.type_, depth + 1) for _ in range(n))
        if isinstance(fc, (EntityField, EntityTupleField)):
            if optional and r.random() < 0.2:
                return None
            return self.entity(fc.type_, depth + 1)
        return self.primitive(owner, f.name, get_schema_field_type(f), optional)

    def primitive(self, owner: type, name: str, kafka_type: str, optional: bool) -> Any:
        r = self.rnd
        if optional and r.random() < 0.08:
            return None
        match kafka_type:
            case "string":
                return self.string(owner.__name__, name)
            case "bytes":
                return r.randbytes(r.choice((0, 1, 4, 16, 40)))
            case "records":
                return self.records()
            case "bool":
                return r.random() < 0.5
            case "int8":
                return r.choice((0, 1, 2, 4, -1, 127, -128, r.randint(-128, 127)))
            case "int16":
                return self.int_value(name, 16)
            case "int32":
                return self.int_value(name, 32)
            case "int64":
                return self.int_value(name, 64)
            case "uint16":
                return r.choice((0, 1, 0xFFFF, r.randint(0, 0xFFFF)))
            case "float64":
                return r.choice((0.0, 1.5, -1.0, 1e308))
            case "uuid":
                return self.topic_id()
            case "error_code":
                return r.choice(ERROR_CODES)
            case "timedelta_i32":
                return datetime.timedelta(milliseconds=self.millis(32))
            case "timedelta_i64":
                return datetime.timedelta(milliseconds=self.millis(64))
            case "datetime_i64":
                ms = r.choice((0, 1_700_000_000_000, -1, r.randint(0, 253_000_000_000_000)))
                return EPOCH + datetime.timedelta(milliseconds=ms)
        raise AssertionError(f"no generator for {kafka_type}")

    def string(self, owner: str, name: str) -> str:
        r = self.rnd
        pools = self.pools
        if "topic" in name or (name == "name" and "Topic" in owner) or name == "resource_name":
            pick = r.random()
            if pick < 0.8:
                return r.choice(pools.topics)
            if pick < 0.9:
                return r.choice(pools.new_topics)
            if pick < 0.93:
                return "__consumer_offsets"
            return self.random_text()
        if "group" in name and "instance" not in name:
            return r.choice(pools.groups) if r.random() < 0.85 else self.random_text()
        if name in ("configuration_keys", "key") or (name == "name" and "Config" in owner):
            return r.choice(pools.configs) if r.random() < 0.85 else self.random_text()
        if name == "value" and "Config" in owner:
            return r.choice(("delete", "compact", "1000", "-1", "0", "lz4", self.random_text()))
        if name == "protocol_type":
            return "consumer"
        if name == "name" and "Protocol" in owner:
            return r.choice(("range", "roundrobin"))
        if name == "member_id":
            return r.choice(("", "fuzz-member", self.random_text()))
        return self.random_text()

    def random_text(self) -> str:
        r = self.rnd
        n = r.choice((0, 1, 3, 8, 30))
        alphabet = "abcxyz-._019" if r.random() < 0.8 else "aé\u00ff\u4e2d\x00/ "
        return "".join(r.choice(alphabet) for _ in range(n))

    def topic_id(self) -> uuid.UUID:
        r = self.rnd
        if self.pools.topic_ids and r.random() < 0.7:
            return r.choice(self.pools.topic_ids)
        return uuid.UUID(int=0) if r.random() < 0.5 else uuid.UUID(int=r.getrandbits(128))

    def records(self) -> bytes:
        """A valid batch (any codec, sometimes idempotent) or one corrupted and then
        resealed with a fresh CRC, so the checks behind the CRC get exercised; or junk."""
        r = self.rnd
        pick = r.random()
        if pick > 0.9:
            return r.randbytes(r.choice((0, 1, 12, 61, 80)))
        count = r.randint(1, 3)
        idempotent = r.random() < 0.3
        batch = build_batch(
            [
                Record(timestamp=1_700_000_000_000 + i, key=r.choice((b"k", None)), value=b"v" * i)
                for i in range(count)
            ],
            compression=r.choice((0, 0, 1, 2, 3, 4)),
            producer_id=r.choice((0, 1)) if idempotent else -1,
            producer_epoch=0 if idempotent else -1,
            base_sequence=r.choice((0, 1, 5)) if idempotent else -1,
        )
        if pick < 0.65:
            return batch
        return reseal(bytearray(batch), r)

    def millis(self, bits: int) -> int:
        r = self.rnd
        if r.random() < 0.85:
            return r.choice((0, 1, 10, 100, -1))
        # timedelta's range (about 2**46 ms) bounds what an int64 duration can carry here.
        bound = min(2 ** (bits - 1) - 1, 2**45)
        return r.randint(-bound, bound)

    def int_value(self, name: str, bits: int) -> int:
        r = self.rnd
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        plausible = r.random() < 0.85
        if "partition" in name or name in ("index", "partition_index"):
            if plausible and not name.startswith("num"):
                return r.choice((0, 1, 2))
            if plausible:
                return r.choice((1, 2, 3))
        elif name in ("count", "replication_factor") and plausible:
            return r.choice((1, 3, -1))
        elif "offset" in name or name == "timestamp":
            if plausible:
                return r.choice((0, 1, 5, -1, -2, -3))
        elif "epoch" in name or name in ("producer_id", "generation_id", "replica_id"):
            if plausible:
                return r.choice((-1, 0, 1))
        elif "bytes" in name and plausible:
            return r.choice((0, 1, 1024, 1 << 20))
        elif name == "acks" and plausible:
            return r.choice((-1, 0, 1))
        elif name == "resource_type" and plausible:
            return r.choice((2, 4, 3, 1))
        elif plausible:
            return r.choice((0, 1, 2, -1))
        return r.choice((low, high, 0, -1, r.randint(low, high)))


# --- frames and mutations -------------------------------------------------------------


class Fuzzer:
    def __init__(self, seed: int, pools: Pools, skip: Sequence[str] = ()) -> None:
        self.rnd = random.Random(seed)
        self.gen = Generator(self.rnd, pools)
        self.mutations = [m for m in MUTATIONS if m not in skip]
        self.correlation = 0

    def frame(self, api_key: int, version: int) -> Frame:
        self.correlation += 1
        request = self.gen.request(api_key, version)
        out = encode(request, self.correlation, self.rnd.choice(("fuzz", "", None)))
        mutation = self.rnd.choice(self.mutations)
        data, note = self.mutate(mutation, out)
        return Frame(api_key, version, mutation, data, note)

    def mutate(self, mutation: str, out: _Out) -> tuple[bytes, str]:
        """Mutate the payload (everything after the size prefix); the prefix is then
        fixed up so the broker reads exactly the mutated payload."""
        r = self.rnd
        buf = bytearray(out.buf)
        note = ""
        # Keep api key and version mostly intact: they pick which decoder runs.
        lo = 8 if r.random() < 0.9 else 4
        if mutation == "truncate":
            cut = r.randrange(4, len(buf))
            note = f"cut at {cut - 4} of {len(buf) - 4}"
            del buf[cut:]
        elif mutation == "bitflip":
            flips = []
            for _ in range(r.choice((1, 1, 2, 4, 8))):
                pos = r.randrange(lo, len(buf))
                bit = r.randrange(8)
                buf[pos] ^= 1 << bit
                flips.append(f"{pos - 4}.{bit}")
            note = "flipped " + ",".join(flips)
        elif mutation == "overwrite":
            pos = r.randrange(lo, len(buf))
            n = r.choice((1, 2, 4, 8))
            fill = r.choice((b"\x00", b"\xff", b"\x80", b"\x7f", None))
            run = fill * n if fill is not None else r.randbytes(n)
            buf[pos : pos + n] = run
            note = f"overwrote {n} at {pos - 4} with {run.hex()}"
        elif mutation in ("absurd-length", "length-lie") and out.lengths:
            pos, kind = r.choice(out.lengths)
            if kind == "uvarint":
                size = _uvarint_size(buf, pos)
                old = _read_uvarint(buf, pos)
            else:
                size = 4 if kind == "int32" else 2
                old = int.from_bytes(buf[pos : pos + size], "big", signed=True)
            if mutation == "absurd-length":
                new = r.choice(ABSURD[kind])
            else:
                new = max(r.choice((old + 1, old - 1, old + 2, old * 2, old + 100, 0)), 0)
                if kind == "int16":
                    new = min(new, 0x7FFF)
            if kind == "uvarint":
                buf[pos : pos + size] = uvarint(new)
            else:
                buf[pos : pos + size] = new.to_bytes(size, "big", signed=True)
            note = f"{kind} length at {pos - 4}: {old} -> {new}"
        elif mutation == "insert":
            pos = r.randrange(lo, len(buf) + 1)
            junk = r.randbytes(r.choice((1, 2, 5, 16)))
            buf[pos:pos] = junk
            note = f"inserted {junk.hex()} at {pos - 4}"
        elif mutation == "append":
            junk = r.randbytes(r.choice((1, 3, 16, 64)))
            buf += junk
            note = f"appended {len(junk)}"
        struct.pack_into(">i", buf, 0, len(buf) - 4)
        return bytes(buf), note


def reseal(batch: bytearray, r: random.Random) -> bytes:
    """Corrupt what the CRC covers (attributes onward), then fix the CRC."""
    for _ in range(r.choice((1, 2, 4))):
        pos = r.randrange(CRC_START, len(batch))
        if r.random() < 0.5:
            batch[pos] ^= 1 << r.randrange(8)
        else:
            batch[pos] = r.choice((0x00, 0xFF, 0x7F, 0x80, r.randrange(256)))
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def _read_uvarint(buf: bytes | bytearray, offset: int) -> int:
    value, shift = 0, 0
    while offset < len(buf):
        byte = buf[offset]
        value |= (byte & 0x7F) << shift
        offset += 1
        if not byte & 0x80:
            break
        shift += 7
    return value
