"""Events, keys and headers as the HTTP API carries them: values base64 in JSON, so any
bytes survive the trip."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import TypeAlias

# An append's headers: a mapping or (name, value) pairs, values encoded as events are.
Headers: TypeAlias = Mapping[str, object] | Iterable[tuple[str, object]]


def encode_value(value: object) -> bytes | None:
    """An event as bytes: bytes as they are, str as UTF-8, anything else as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def key_bytes(key: str | bytes) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode("utf-8")


def encode_headers(headers: Headers | None) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name), encode_value(value)) for name, value in items]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def decoded(text: str | None, encoding: str | None) -> bytes | None:
    if text is None:
        return None
    if encoding == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")
