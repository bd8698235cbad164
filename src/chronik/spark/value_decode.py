"""Schema'd keys and values of a read batch decoded into typed Arrow columns.

Each record is decoded with its own writer schema (the id in its Confluent header, fetched
once per id and process) and resolved to the topic's reader schema: Avro by Avro's schema
resolution (fields the writer lacks take the reader's defaults), Protobuf by parsing the
bytes as the reader's message of the same name, JSON by mapping the document onto the
reader's type. The per-record work is the decode itself; the binary column is read out and
the typed column built by Arrow's converters, with no pandas rows between.

A record that does not decode (no magic byte, an unknown id, a corrupt body, a value that
does not fit the column) fails the read with its topic, partition, offset and cause, or with
``decodeErrorMode=null`` becomes null, its bytes kept in ``<column>_raw``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError as ProtobufDecodeError

from chronik.schemas import framing
from chronik.schemas.types import SchemaError, ValueMismatch
from chronik.spark import avro_columns
from chronik.spark.registry_client import (
    SCHEMA_NOT_FOUND,
    FetchedSchema,
    RegistryError,
    client_for,
)
from chronik.spark.schema_options import ColumnPlan, DecodePlan, mapped_type, subject_schema
from chronik.spark.schema_types import Mapped

MAX_UNKNOWN_IDS = 10_000


class NotFramed(ValueError):
    """A value that is not in Confluent's wire format (chronik.schemas.framing)."""


def split(data: bytes) -> tuple[int, int]:
    """(schema id, where the payload starts) of a framed value; NotFramed says why not."""
    if len(data) < framing.HEADER_SIZE:
        raise NotFramed(f"{len(data)} bytes, fewer than the 5 of Confluent's header")
    if data[0] != framing.MAGIC:
        raise NotFramed(f"magic byte {data[0]}, not 0: not Confluent's wire format")
    schema_id = framing.HEADER.unpack_from(data)[1]
    if schema_id < 0:
        raise NotFramed(f"negative schema id {schema_id}")
    return schema_id, framing.HEADER_SIZE


class UnknownSchema(ValueError):
    """A record names a schema id the registry does not have: that record's fault. (A
    registry that cannot be reached fails the read instead: every record would be lost.)"""


_ERRORS = (
    NotFramed,
    framing.FramingError,
    SchemaError,
    ValueMismatch,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    UnicodeDecodeError,
    ProtobufDecodeError,
)


class DecodeError(RuntimeError):
    pass


class _TopicReader:
    """Decodes one topic's column: payload bytes -> the Python value Arrow takes."""

    def __init__(self, url: str, schema_type: str, reader: FetchedSchema, mapped: Mapped):
        self.client = client_for(url)
        self.schema_type = schema_type
        self.reader = reader
        self.convert = mapped.convert
        self.writers: dict[int, Callable[[bytes], Any]] = {}
        self.unknown: set[int] = set()
        self.programs: dict[int, tuple[avro_columns.Program, dict[str, Any]] | None] = {}

    def writer(self, schema_id: int) -> FetchedSchema:
        """The schema of this id; UnknownSchema (remembered) when the registry has none."""
        if schema_id in self.unknown:
            raise UnknownSchema(f"schema id {schema_id} is not in the schema registry")
        try:
            return self.client.schema(schema_id)
        except RegistryError as exc:
            if exc.code != SCHEMA_NOT_FOUND:
                raise
            if len(self.unknown) < MAX_UNKNOWN_IDS:
                self.unknown.add(schema_id)
            raise UnknownSchema(f"schema id {schema_id} is not in the schema registry") from None

    def decode(self, data: bytes) -> Any:
        schema_id, start = split(data)
        decode = self.writers.get(schema_id)
        if decode is None:
            decode = self.writers[schema_id] = self._decoder(schema_id)
        value = decode(data) if self.schema_type == "PROTOBUF" else decode(data[start:])
        return self.convert(value) if self.convert is not None else value

    def compiled(self, raw: pa.Array, target: pa.DataType) -> pa.Array | None:
        """The column through avro_columns' compiled decoder, when every value is framed
        with one schema id whose records it reads; else None."""
        n = len(raw)
        if self.schema_type != "AVRO" or n == 0 or raw.null_count:
            return None
        _, offsets_buf, data_buf = raw.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32, n + 1, raw.offset * 4).astype(np.int64)
        starts, ends = offsets[:-1], offsets[1:]
        if data_buf is None or (ends - starts < framing.HEADER_SIZE).any():
            return None
        buf = np.frombuffer(data_buf, np.uint8)
        if (buf[starts] != framing.MAGIC).any():
            return None
        ids = (
            (buf[starts + 1].astype(np.int64) << 24)
            | (buf[starts + 2].astype(np.int64) << 16)
            | (buf[starts + 3].astype(np.int64) << 8)
            | buf[starts + 4].astype(np.int64)
        )
        schema_id = int(ids[0])
        if (ids != schema_id).any():
            return None
        if schema_id not in self.programs:
            self.programs[schema_id] = self._program(schema_id)
        found = self.programs[schema_id]
        if found is None:
            return None
        program, plan = found
        return avro_columns.decode_column(
            program, plan, buf, starts + framing.HEADER_SIZE, ends, target
        )

    def _program(self, schema_id: int) -> tuple[avro_columns.Program, dict[str, Any]] | None:
        try:
            writer = self.writer(schema_id)
        except UnknownSchema:
            return None
        if writer.schema_type != "AVRO":
            return None
        program = avro_columns.compile_program(writer.parsed.fastavro_schema)  # type: ignore[attr-defined]
        if program is None:
            return None
        plan = avro_columns.reader_plan(program, self.reader.parsed.fastavro_schema)  # type: ignore[attr-defined]
        return (program, plan) if plan is not None else None

    def decode_all(
        self, raw: pa.Array, out: list[Any], failed: Callable[[int, BaseException], None]
    ) -> None:
        """Decode every non-null value of ``raw`` into ``out``; ``failed`` hears of the
        ones that do not decode."""
        if self.schema_type == "AVRO":
            self._avro_all(raw, out, failed)
            return
        decode = self.decode
        for i, data in enumerate(raw.to_pylist()):
            if data is None:
                continue
            try:
                out[i] = decode(data)
            except _ERRORS as exc:
                failed(i, exc)

    def _avro_all(
        self, raw: pa.Array, out: list[Any], failed: Callable[[int, BaseException], None]
    ) -> None:
        # The headers are read for the whole column at once from the Arrow buffers, and
        # fastavro reads each value in place from one buffer: no bytes object per record.
        n = len(raw)
        if n == 0:
            return
        _, offsets_buf, data_buf = raw.buffers()
        offsets = np.frombuffer(offsets_buf, np.int32, n + 1, raw.offset * 4).astype(np.int64)
        data = data_buf.to_pybytes() if data_buf is not None else b""
        buf = np.frombuffer(data, np.uint8)
        starts, ends = offsets[:-1], offsets[1:]
        present = raw.is_valid().to_numpy(zero_copy_only=False)
        framed = present & (ends - starts >= framing.HEADER_SIZE)
        if framed.any():
            at = starts[framed]
            framed[framed] = buf[at] == framing.MAGIC
        for i in np.flatnonzero(present & ~framed).tolist():
            try:
                split(data[starts[i] : ends[i]])
            except NotFramed as exc:
                failed(i, exc)
        chosen = np.flatnonzero(framed)
        if len(chosen) == 0:
            return
        at = starts[chosen]
        ids = (
            (buf[at + 1].astype(np.int64) << 24)
            | (buf[at + 2].astype(np.int64) << 16)
            | (buf[at + 3].astype(np.int64) << 8)
            | buf[at + 4].astype(np.int64)
        )
        fo = io.BytesIO(data)
        read = fastavro.schemaless_reader
        convert = self.convert
        schemas: dict[int, tuple[Any, Any, dict[str, Any] | None]] = {}
        for i, start, end, schema_id in zip(
            chosen.tolist(), at.tolist(), ends[chosen].tolist(), ids.tolist(), strict=True
        ):
            try:
                pair = schemas.get(schema_id)
                if pair is None:
                    pair = schemas[schema_id] = self._avro_schemas(schema_id)
                fo.seek(start + framing.HEADER_SIZE)
                try:
                    value = read(fo, pair[0], pair[1])
                except Exception as exc:  # fastavro's errors have no common base
                    raise ValueMismatch(
                        f"payload does not decode: {type(exc).__name__}: {exc}"
                    ) from None
                if pair[2]:
                    value.update(pair[2])
                if fo.tell() != end:
                    raise ValueMismatch(
                        f"payload has {end - fo.tell()} bytes after the value it holds"
                    )
                out[i] = convert(value) if convert is not None else value
            except _ERRORS as exc:
                failed(i, exc)

    def _avro_schemas(self, schema_id: int) -> tuple[Any, Any, dict[str, Any] | None]:
        """fastavro's (writer, reader, defaults) for records of this id: reader None when
        the writer's own decoding gives the reader's shape, with ``defaults`` added."""
        writer = self.writer(schema_id)
        if writer.schema_type != "AVRO":
            raise SchemaError(f"schema id {schema_id} is {writer.schema_type}, not AVRO")
        parsed, reader = writer.parsed, self.reader.parsed
        if reader.canonical() == parsed.canonical():
            return parsed.fastavro_schema, None, None  # type: ignore[attr-defined]
        defaults = added_defaults(parsed.fastavro_schema, reader.fastavro_schema)  # type: ignore[attr-defined]
        if defaults is not None:
            return parsed.fastavro_schema, None, defaults  # type: ignore[attr-defined]
        return parsed.fastavro_schema, reader.fastavro_schema, None  # type: ignore[attr-defined]

    def _decoder(self, schema_id: int) -> Callable[[bytes], Any]:
        writer = self.writer(schema_id)
        if writer.schema_type != self.schema_type:
            raise SchemaError(
                f"schema id {schema_id} is {writer.schema_type}, not {self.schema_type}"
            )
        if self.schema_type == "AVRO":
            parsed = writer.parsed
            reader = self.reader.parsed
            resolve = None if reader.canonical() == parsed.canonical() else reader
            return lambda payload: parsed.decode(payload, reader=resolve)  # type: ignore[attr-defined]
        if self.schema_type == "JSON":
            return json.loads
        return self._protobuf(writer)

    def _protobuf(self, writer: FetchedSchema) -> Callable[[bytes], Any]:
        """The reader's message (its schema's first) parses the bytes of the same message
        written with any version; a record of another message does not decode."""
        writer_schema = writer.parsed
        cls = self.reader.parsed.message_class()  # type: ignore[attr-defined]
        wanted = cls.DESCRIPTOR.full_name
        checked: set[tuple[int, ...]] = set()

        def decode(data: bytes) -> Any:
            indexes, message = framing.read_message_indexes(data[framing.HEADER_SIZE :])
            if tuple(indexes) not in checked:
                name = writer_schema.message_name(indexes)  # type: ignore[attr-defined]
                if name != wanted:
                    raise SchemaError(f"the record holds a {name}, the column a {wanted}")
                checked.add(tuple(indexes))
            msg = cls()
            msg.ParseFromString(message)
            return msg

        return decode


_PLAIN_DEFAULTS = ("null", "boolean", "int", "long", "float", "double", "string")


def added_defaults(writer: Any, reader: Any) -> dict[str, Any] | None:
    """The common evolution, resolved without Avro's resolution per record: two records
    whose shared fields are defined alike, where the reader only adds fields with plain
    defaults (null, boolean, numbers, strings) and may drop some. Then a value decoded with
    the writer schema plus these defaults is the resolved value (fields the reader lacks are
    left for Arrow to ignore). None when the schemas differ otherwise."""
    if not (isinstance(writer, dict) and isinstance(reader, dict)):
        return None
    if writer.get("type") != "record" or reader.get("type") != "record":
        return None
    if writer.get("name") != reader.get("name"):
        return None
    theirs = {f["name"]: f for f in writer["fields"]}
    defaults: dict[str, Any] = {}
    for f in reader["fields"]:
        if "aliases" in f:
            return None
        known = theirs.get(f["name"])
        if known is not None:
            if _definition(known["type"]) != _definition(f["type"]):
                return None
            continue
        kind = f["type"][0] if isinstance(f["type"], list) else f["type"]
        if "default" not in f or kind not in _PLAIN_DEFAULTS:
            return None
        defaults[f["name"]] = f["default"]
    return defaults


def _definition(node: Any) -> str:
    return json.dumps(node, sort_keys=True)


class ColumnDecoder:
    def __init__(self, plan: ColumnPlan, url: str, error_mode: str):
        self.plan = plan
        self.url = url
        self.fail = error_mode == "fail"
        from pyspark.sql.pandas.types import to_arrow_type

        self.arrow_type = to_arrow_type(plan.dtype, timezone="UTC")
        self.readers: dict[str, _TopicReader] = {}

    def _reader(self, topic: str) -> _TopicReader:
        found = self.readers.get(topic)
        if found is not None:
            return found
        fmt = self.plan.fmt
        schema_id = self.plan.readers.get(topic)
        if schema_id is not None:
            schema = client_for(self.url).schema(schema_id)
        else:  # a topic that appeared after planning (subscribePattern, streaming)
            schema = subject_schema(self.url, fmt, topic).schema
        mapped = mapped_type(schema, fmt.subject_of(topic))
        found = self.readers[topic] = _TopicReader(self.url, fmt.schema_type, schema, mapped)
        return found

    def decode(
        self, raw: pa.Array, topic: str, partition: int, offsets: pa.Array
    ) -> tuple[pa.Array, pa.Array | None]:
        """The typed column, and the bytes of the records that did not decode (or None)."""
        reader = self._reader(topic)
        compiled = reader.compiled(raw, self.arrow_type)
        if compiled is not None:
            return compiled, None
        out: list[Any] = [None] * len(raw)
        failed: list[int] = []
        reader.decode_all(
            raw, out, lambda i, exc: self._failed(i, exc, topic, partition, offsets, failed)
        )
        array = self._build(out, topic, partition, offsets, failed)
        if not failed:
            return array, None
        failed.sort()
        mask = np.zeros(len(raw), np.bool_)
        mask[failed] = True
        return array, pc.if_else(pa.array(mask), raw, pa.nulls(len(raw), pa.binary()))

    def _failed(
        self,
        i: int,
        exc: BaseException,
        topic: str,
        partition: int,
        offsets: pa.Array,
        failed: list[int],
    ) -> None:
        if self.fail:
            why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, _KNOWN) else str(exc)
            raise DecodeError(
                f"cannot decode the {self.plan.fmt.column} of {topic}-{partition} at offset "
                f"{offsets[i].as_py()} as {self.plan.fmt.schema_type}: {why} "
                "(decodeErrorMode=null keeps such records, null, with their bytes)"
            ) from None
        failed.append(i)

    def _build(
        self, out: list[Any], topic: str, partition: int, offsets: pa.Array, failed: list[int]
    ) -> pa.Array:
        try:
            return pa.array(out, self.arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        # Some value does not fit the column: find which, one by one.
        for i, value in enumerate(out):
            if value is None:
                continue
            try:
                pa.array([value], self.arrow_type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                self._failed(
                    i,
                    ValueMismatch(f"the value does not fit the column: {exc}"),
                    topic,
                    partition,
                    offsets,
                    failed,
                )
                out[i] = None
        failed.sort()
        return pa.array(out, self.arrow_type)


_KNOWN = (
    NotFramed,
    framing.FramingError,
    UnknownSchema,
    SchemaError,
    ValueMismatch,
    ProtobufDecodeError,
)


class BatchDecoder:
    """Turns the source's raw batches into the typed schema of a DecodePlan."""

    def __init__(self, plan: DecodePlan, schema: pa.Schema):
        self.plan = plan
        self.schema = schema
        self.columns = [
            (c.fmt.column, ColumnDecoder(c, plan.url, plan.error_mode)) for c in plan.columns
        ]

    def __call__(self, batch: pa.RecordBatch, topic: str, partition: int) -> pa.RecordBatch:
        arrays = {name: batch.column(name) for name in batch.schema.names}
        offsets = batch.column("offset")
        for column, decoder in self.columns:
            typed, raw = decoder.decode(arrays[column], topic, partition, offsets)
            arrays[column] = typed
            if self.plan.error_mode == "null":
                arrays[f"{column}_raw"] = (
                    raw if raw is not None else pa.nulls(batch.num_rows, pa.binary())
                )
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in self.schema], schema=self.schema)
