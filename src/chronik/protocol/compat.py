"""Build kio entities without caring which version's fields exist.

Handlers describe a response once with every field they know; `build` keeps the
fields the negotiated version has and turns plain ints into the wire types kio
expects (error codes, millisecond durations, timestamps).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
from functools import cache
from typing import Any
from uuid import UUID

from kio.index import load_payload_module, load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from chronik.protocol import legacy

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _to_timedelta(value: Any) -> Any:
    if isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def _to_datetime(value: Any) -> Any:
    if isinstance(value, int):
        if value < 0:
            return None
        return EPOCH + datetime.timedelta(milliseconds=value)
    return value


def _to_error(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


_COERCE = {
    "error_code": _to_error,
    "timedelta_i32": _to_timedelta,
    "timedelta_i64": _to_timedelta,
    "datetime_i64": _to_datetime,
}


@cache
def _plan(cls: type) -> tuple[frozenset[str], tuple[tuple[str, Any], ...]]:
    names = []
    coercions = []
    for field in dataclasses.fields(cls):
        names.append(field.name)
        coerce = _COERCE.get(field.metadata.get("kafka_type", ""))
        if coerce is not None:
            coercions.append((field.name, coerce))
    return frozenset(names), tuple(coercions)


def build(cls: type, /, **fields: Any) -> Any:
    names, coercions = _plan(cls)
    kept = {k: v for k, v in fields.items() if k in names}
    for name, coerce in coercions:
        if name in kept:
            kept[name] = coerce(kept[name])
    return cls(**kept)


@cache
def response_module(api_key: int, version: int) -> Any:
    legacy_module = legacy.RESPONSES.get((api_key, version))
    if legacy_module is not None:
        return legacy_module
    return load_payload_module(api_key, version, EntityType.response)


@cache
def request_class(api_key: int, version: int) -> type:
    legacy_class = legacy.REQUESTS.get((api_key, version))
    if legacy_class is not None:
        return legacy_class
    return load_request_schema(api_key, version)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def decode(cls: type, buf: bytes, offset: int) -> tuple[Any, int]:
    return _reader(cls)(buf, offset)


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def millis(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


ZERO_UUID = UUID(int=0)
