"""Event values under a schema of the broker's own registry, for the event store's HTTP API.

An append that names a subject (``?subject=NAME`` or ``?subject_strategy=topic``, and
``&version=N``, the latest by default) carries each value as a JSON document. Each is
checked against the subject's schema and stored as Confluent's serializers store it
(chronik.schemas.framing: magic byte 0, the schema id, then the Avro binary, the UTF-8
JSON text, or the Protobuf message indexes and message), so any Kafka consumer with
Confluent's deserializers reads the events. A read with ``?decode=true`` turns framed
values back into JSON with the schema their id names.

Avro values are in the form fastavro takes: a record is an object, a union takes the plain
value of one branch. Protobuf values are Protobuf's JSON mapping of the subject's first
message, or of the one ``&message=full.Name`` names; decoded, they are that mapping again
(field names as declared, 64-bit integers as strings). Decoded Avro values the JSON types
cannot hold are written as Avro's
JSON encoding and Python's text forms would have them: bytes and fixed as a string of the
code points 0-255, decimals as their digits in a string, dates and times in ISO 8601, UUIDs
as text, NaN and the infinities as "NaN", "Infinity" and "-Infinity".
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, cast

from chronik.http.server import HttpError
from chronik.registry.errors import RegistryError
from chronik.registry.registry import Registered
from chronik.registry.state import StoredSchema
from chronik.schemas.framing import (
    FramingError,
    frame,
    message_indexes,
    read_message_indexes,
    unframe,
)
from chronik.schemas.types import ParsedSchema, SchemaError, ValueMismatch

CODED_TYPES = ("AVRO", "JSON", "PROTOBUF")

NO_REGISTRY = (
    "schema subjects need the broker's schema registry: start the broker with "
    "schema.registry.listen (chronik serve --schema-registry-listen HOST:PORT)"
)


class SchemaSource(Protocol):
    """What the event store uses of the schema registry (chronik.registry.registry)."""

    async def catch_up(self, end: int | None = None) -> None:
        """Read this broker's copy of ``_schemas`` up to what it may read."""
        ...

    def version(self, subject: str, spec: str | int, deleted: bool = False) -> Registered: ...

    def schema_by_id(self, schema_id: int) -> StoredSchema: ...

    def parsed(self, stored: StoredSchema) -> ParsedSchema: ...


class ValueCodec(Protocol):
    """The codec of a format in CODED_TYPES (AvroSchema, JsonSchema)."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, payload: bytes) -> Any: ...


class MessageCodec(Protocol):
    """The codec of a format whose schema holds several messages (ProtobufSchema)."""

    def encode(self, value: dict[str, Any], name: str | None = None) -> bytes: ...

    def decode(self, payload: bytes, name: str | None = None) -> dict[str, Any]: ...

    def first_message_name(self) -> str: ...

    def message_indexes(self, name: str) -> list[int]: ...

    def message_name(self, indexes: list[int]) -> str: ...


@dataclass(frozen=True)
class WriterSchema:
    """The schema an append's values are written with."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    codec: Any  # ValueCodec, or MessageCodec when ``message`` is set
    message: str | None
    prefix: bytes  # the framing ahead of each payload

    def encode(self, index: int, value: Any) -> bytes:
        """The framed value of event ``index``; 422 naming the event when it does not fit."""
        try:
            if self.message is None:
                payload = cast(ValueCodec, self.codec).encode(value)
            else:
                payload = cast(MessageCodec, self.codec).encode(value, self.message)
        except ValueMismatch as exc:
            reason = str(exc)
            raise HttpError(
                422,
                "value_mismatch",
                f"event {index} does not fit {self.subject} version {self.version} "
                f"(schema id {self.schema_id}): {reason}",
                index=index,
                reason=reason,
                subject=self.subject,
                version=self.version,
                schema_id=self.schema_id,
            ) from None
        return self.prefix + payload


def requested_subject(query: dict[str, str], topic: str) -> tuple[str, str, str | None] | None:
    """(subject, version, message) an append names, or None when it names no subject."""
    subject = query.get("subject")
    strategy = query.get("subject_strategy")
    version = query.get("version")
    message = query.get("message") or None
    if subject is not None and strategy is not None:
        raise HttpError(400, "bad_request", "give subject or subject_strategy, not both")
    if strategy is not None:
        if strategy != "topic":
            raise HttpError(
                400,
                "bad_request",
                "subject_strategy takes only topic (the subject <topic>-value); "
                "name any other subject with ?subject=",
            )
        subject = f"{topic}-value"
    if subject is None:
        if version is not None or message is not None:
            raise HttpError(
                400, "bad_request", "version and message need subject or subject_strategy"
            )
        return None
    if not subject:
        raise HttpError(400, "bad_request", "empty subject")
    return subject, version or "latest", message


async def writer_schema(
    registry: SchemaSource | None, subject: str, version: str, message: str | None = None
) -> WriterSchema:
    """The subject's schema at ``version`` (and, for Protobuf, its ``message``, the first
    by default): 404 unknown subject or version, 400 a bad version or message, 501
    without a registry."""
    if registry is None:
        raise HttpError(501, "registry_not_served", NO_REGISTRY)
    # A schema just registered through another broker may not be read here yet.
    await registry.catch_up()
    try:
        registered = registry.version(subject, version)
    except RegistryError as exc:
        if exc.code == 40401:
            raise HttpError(
                404, "unknown_subject", f"no schema subject {subject!r}", subject=subject
            ) from None
        if exc.code == 40402:
            raise HttpError(
                404,
                "unknown_version",
                f"subject {subject!r} has no version {version}",
                subject=subject,
            ) from None
        raise HttpError(
            400, "bad_request", f"version must be latest or 1 to 2^31-1: {exc.message}"
        ) from None
    stored = registered.schema
    if stored.schema_type not in CODED_TYPES:
        raise HttpError(
            400,
            "unsupported_schema_type",
            f"subject {subject!r} has a {stored.schema_type} schema",
            subject=subject,
        )
    codec = _codec(registry, stored)
    prefix = frame(stored.schema_id, b"")
    if stored.schema_type == "PROTOBUF":
        messages = cast(MessageCodec, codec)
        try:
            message = message or messages.first_message_name()
            prefix += message_indexes(messages.message_indexes(message))
        except SchemaError as exc:
            raise HttpError(
                400, "bad_request", f"subject {subject!r}: {exc}", subject=subject
            ) from None
    elif message is not None:
        raise HttpError(
            400,
            "bad_request",
            f"message names a Protobuf message; subject {subject!r} has a "
            f"{stored.schema_type} schema",
        )
    return WriterSchema(
        subject,
        registered.version,
        stored.schema_id,
        stored.schema_type,
        codec,
        message,
        prefix,
    )


def _codec(registry: SchemaSource, stored: StoredSchema) -> Any:
    try:
        return registry.parsed(stored)
    except (RegistryError, SchemaError, ImportError) as exc:
        # The registry took the schema, so this broker lacks what parses it.
        raise HttpError(
            500,
            "schema_unusable",
            f"schema id {stored.schema_id} ({stored.schema_type}) does not parse here: "
            f"{getattr(exc, 'message', exc)}",
        ) from None


async def value_decoder(registry: SchemaSource | None) -> ValueDecoder:
    """A decoder for one read, on a registry state that has read what this broker may."""
    if registry is None:
        raise HttpError(501, "registry_not_served", NO_REGISTRY)
    await registry.catch_up()
    return ValueDecoder(registry)


class ValueDecoder:
    """Decodes the framed values of one read, each with the schema its id names."""

    def __init__(self, registry: SchemaSource) -> None:
        self.registry = registry
        self._codecs: dict[int, tuple[str, Any] | str | None] = {}

    def fields(self, value: bytes | None) -> dict[str, Any]:
        """``schema_id`` and ``value_json`` of a framed value (``decode_error`` instead of
        ``value_json`` when it does not decode); nothing for a value that is not framed or
        whose id the registry does not know."""
        if value is None:
            return {}
        framed = unframe(value)
        if framed is None:
            return {}
        schema_id, payload = framed
        codec = self._codec(schema_id)
        if codec is None:
            return {}
        if isinstance(codec, str):
            return {"schema_id": schema_id, "decode_error": codec}
        schema_type, found = codec
        try:
            if schema_type == "PROTOBUF":
                messages = cast(MessageCodec, found)
                indexes, body = read_message_indexes(payload)
                decoded = messages.decode(body, messages.message_name(indexes))
            else:
                decoded = cast(ValueCodec, found).decode(payload)
        except (ValueMismatch, SchemaError, FramingError) as exc:
            return {"schema_id": schema_id, "decode_error": str(exc)}
        return {"schema_id": schema_id, "value_json": json_value(decoded)}

    def _codec(self, schema_id: int) -> tuple[str, Any] | str | None:
        if schema_id in self._codecs:
            return self._codecs[schema_id]
        found: tuple[str, Any] | str | None
        try:
            stored = self.registry.schema_by_id(schema_id)
        except RegistryError:
            found = None
        else:
            if stored.schema_type not in CODED_TYPES:
                found = f"{stored.schema_type} values are not decoded here"
            else:
                try:
                    found = (stored.schema_type, _codec(self.registry, stored))
                except HttpError as exc:
                    found = str(exc)
        self._codecs[schema_id] = found
        return found


def json_value(value: Any) -> Any:
    """A decoded value with only JSON's types (see the module's docstring)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("latin-1")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    return str(value)
