"""The source's and sink's schema options, and the reader schemas they choose.

``valueFormat`` / ``keyFormat``: avro, json or protobuf (absent: raw bytes).
``schemaRegistryUrl``: the registry (default: the one the brokers serve).
``valueSubject`` / ``keySubject``: one subject for every topic (default: TopicNameStrategy,
``<topic>-value`` / ``<topic>-key``, each topic its own).
``valueSchemaVersion`` / ``keySchemaVersion``: the reader schema's version (default latest).
``decodeErrorMode``: fail (default) or null (the column null, the bytes in ``<column>_raw``).
``autoRegisterSchema`` (sink): register the schema derived from the DataFrame (Avro only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import DataType, StructField, StructType

from chronik.spark.options import OptionError, option_bool
from chronik.spark.registry_client import (
    SUBJECT_NOT_FOUND,
    VERSION_NOT_FOUND,
    FetchedSchema,
    RegistryError,
    SubjectSchema,
    client_for,
)
from chronik.spark.registry_discovery import registry_url
from chronik.spark.schema_types import Mapped, UnmappableSchema

FORMATS = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
COLUMNS = ("key", "value")


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (key or value) is framed and which subject names its schema."""

    column: str
    schema_type: str  # AVRO | JSON | PROTOBUF
    subject: str | None  # None: TopicNameStrategy
    version: str  # "latest" or a number

    def subject_of(self, topic: str) -> str:
        return self.subject or f"{topic}-{self.column}"


@dataclass(frozen=True)
class SchemaOptions:
    url: str
    columns: tuple[ColumnFormat, ...]
    error_mode: str  # fail | null
    auto_register: bool


def wants_schemas(options: Mapping[str, str]) -> bool:
    return any(options.get(f"{c}Format") for c in COLUMNS)


def parse_schema_options(options: Mapping[str, str], kafka: dict[str, str]) -> SchemaOptions | None:
    """The schema options, or None when neither column has a format."""
    columns = []
    for column in COLUMNS:
        given = options.get(f"{column}Format")
        if not given:
            continue
        schema_type = FORMATS.get(given.strip().lower())
        if schema_type is None:
            raise OptionError(
                f"option '{column}Format' must be avro, json or protobuf, got {given!r}"
            )
        version = options.get(f"{column}SchemaVersion", "latest").strip().lower()
        if version != "latest" and not (version.isdigit() and int(version) > 0):
            raise OptionError(
                f"option '{column}SchemaVersion' must be latest or a version "
                f"number, got {version!r}"
            )
        columns.append(ColumnFormat(column, schema_type, options.get(f"{column}Subject"), version))
    if not columns:
        return None
    mode = options.get("decodeErrorMode", "fail").strip().lower()
    if mode not in ("fail", "null"):
        raise OptionError(f"option 'decodeErrorMode' must be fail or null, got {mode!r}")
    auto = option_bool(options, "autoRegisterSchema", False)
    if auto and any(c.schema_type != "AVRO" for c in columns):
        raise OptionError("option 'autoRegisterSchema' registers Avro schemas only")
    return SchemaOptions(registry_url(options, kafka), tuple(columns), mode, auto)


def subject_schema(url: str, fmt: ColumnFormat, topic: str) -> SubjectSchema:
    """The subject's chosen version for ``topic``; one clear OptionError when it is not
    there or is of another format."""
    subject = fmt.subject_of(topic)
    try:
        found = client_for(url).version(subject, fmt.version)
    except RegistryError as exc:
        if exc.code == SUBJECT_NOT_FOUND:
            raise OptionError(
                f"no schema for the {fmt.column}s of topic {topic!r}: subject {subject!r} "
                f"is not in the schema registry at {url}"
            ) from None
        if exc.code == VERSION_NOT_FOUND:
            raise OptionError(
                f"subject {subject!r} has no version {fmt.version} in the schema registry at {url}"
            ) from None
        raise
    if found.schema.schema_type != fmt.schema_type:
        raise OptionError(
            f"subject {subject!r} holds a {found.schema.schema_type} schema, but option "
            f"'{fmt.column}Format' says {fmt.schema_type}"
        )
    return found


def mapped_type(schema: FetchedSchema, subject: str) -> Mapped:
    """The Spark type a subject's schema gives its column (see schema_types)."""
    from chronik.spark import schema_types

    try:
        if schema.schema_type == "AVRO":
            return schema_types.avro_type(schema.parsed.fastavro_schema)  # type: ignore[attr-defined]
        if schema.schema_type == "JSON":
            return schema_types.json_schema_type(schema.document())
        message = schema.parsed.message_class()  # type: ignore[attr-defined]
        return schema_types.protobuf_type(message.DESCRIPTOR)
    except UnmappableSchema as exc:
        raise OptionError(f"subject {subject!r}: {exc}") from None


def merge(types: Iterable[tuple[str, DataType]], column: str) -> DataType:
    """One column type for several topics: equal types, or structs whose fields of one name
    have one type (a topic without a field gives null there)."""
    merged: DataType | None = None
    first = ""
    for topic, dtype in types:
        if merged is None:
            merged, first = dtype, topic
            continue
        if merged == dtype:
            continue
        if not (isinstance(merged, StructType) and isinstance(dtype, StructType)):
            raise OptionError(
                f"the {column} schemas of topics {first!r} and {topic!r} "
                "give different types; read them apart"
            )
        fields = {f.name: f for f in merged.fields}
        for f in dtype.fields:
            known = fields.get(f.name)
            if known is None:
                fields[f.name] = StructField(f.name, f.dataType, True)
            elif known.dataType != f.dataType:
                raise OptionError(
                    f"field {f.name!r} of the {column} has one type in topic {first!r} and "
                    f"another in topic {topic!r}; read them apart"
                )
        merged = StructType(list(fields.values()))
    assert merged is not None
    return merged


@dataclass(frozen=True)
class ColumnPlan:
    """A decoded column: its format, its type, and each known topic's reader schema id."""

    fmt: ColumnFormat
    dtype: DataType
    readers: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DecodePlan:
    url: str
    columns: tuple[ColumnPlan, ...]
    error_mode: str

    def spark_fields(self, base: StructType) -> StructType:
        by_column = {c.fmt.column: c for c in self.columns}
        fields = [
            StructField(f.name, by_column[f.name].dtype, True) if f.name in by_column else f
            for f in base.fields
        ]
        if self.error_mode == "null":
            from pyspark.sql.types import BinaryType

            fields += [StructField(f"{c.fmt.column}_raw", BinaryType(), True) for c in self.columns]
        return StructType(fields)


def plan_decoding(options: SchemaOptions, topics: Iterable[str]) -> DecodePlan:
    """The reader schema of each topic and column, and the column types they give."""
    topics = sorted(set(topics))
    if not topics:
        raise OptionError("no topic to read, so no subject to take the schema from")
    plans = []
    for fmt in options.columns:
        found = {t: subject_schema(options.url, fmt, t) for t in topics}
        dtype = merge(
            ((t, mapped_type(s.schema, s.subject).dtype) for t, s in found.items()), fmt.column
        )
        plans.append(ColumnPlan(fmt, dtype, {t: s.schema_id for t, s in found.items()}))
    return DecodePlan(options.url, tuple(plans), options.error_mode)
