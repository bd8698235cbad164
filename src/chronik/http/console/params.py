"""Query parameters and JSON bodies of the console's API, checked: lists are paged
server-side (``offset``, ``limit`` at most MAX_LIMIT) and filtered by ``q`` (a
case-insensitive substring), answering ``{"total", "items"}``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from chronik.http.server import HttpError

MAX_LIMIT = 500
DEFAULT_LIMIT = 50
MAX_Q_CHARS = 256

T = TypeVar("T")


def int_param(query: dict[str, str], name: str, default: int | None, low: int, high: int) -> int:
    text = query.get(name, "")
    if text == "":
        if default is None:
            raise HttpError(400, "bad_request", f"{name} is required")
        return default
    body = text[1:] if text.startswith("-") else text
    if not body.isdigit() or len(body) > 19:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    return value


def bool_param(query: dict[str, str], name: str, default: bool) -> bool:
    text = query.get(name, "").lower()
    if text == "":
        return default
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise HttpError(400, "bad_request", f"{name} must be true or false")


def filter_text(query: dict[str, str]) -> str:
    q = query.get("q", "")
    if len(q) > MAX_Q_CHARS:
        raise HttpError(400, "bad_request", f"q is longer than {MAX_Q_CHARS} characters")
    return q.lower()


def page(
    query: dict[str, str], items: Sequence[T], name: Callable[[T], str]
) -> tuple[int, list[T]]:
    """(total after the q filter, the page) of ``items`` sorted by ``name``."""
    offset = int_param(query, "offset", 0, 0, 2**31)
    limit = int_param(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    q = filter_text(query)
    chosen = [i for i in items if q in name(i).lower()] if q else list(items)
    chosen.sort(key=name)
    return len(chosen), chosen[offset : offset + limit]


def json_body(body: bytes) -> dict[str, Any]:
    if not body:
        raise HttpError(400, "bad_request", "a JSON object body is required")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise HttpError(400, "bad_request", "the body is not JSON") from None
    if not isinstance(doc, dict):
        raise HttpError(400, "bad_request", "the body must be a JSON object")
    return doc


def field_of(doc: dict[str, Any], name: str, kind: type | tuple[type, ...],
             default: Any = ..., what: str = "") -> Any:
    if name not in doc or doc[name] is None:
        if default is ...:
            raise HttpError(400, "bad_request", f"{what or name} is required")
        return default
    value = doc[name]
    if isinstance(value, bool) and kind is int:
        raise HttpError(400, "bad_request", f"{what or name} must be an integer")
    if not isinstance(value, kind):
        raise HttpError(400, "bad_request", f"{what or name} has the wrong type")
    return value
