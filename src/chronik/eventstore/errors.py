"""What the store raises when the broker refuses a request."""

from __future__ import annotations

from typing import Any, NoReturn


class EventStoreError(Exception):
    """The broker refused a request (``status`` the HTTP status, ``error`` its code)."""

    def __init__(self, status: int, error: str, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.body = body


class VersionConflict(EventStoreError):
    """An append's expected version did not hold; nothing of it was written."""

    def __init__(self, key: str | bytes | None, expected: int | None, actual: int | None) -> None:
        shown = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        super().__init__(
            412,
            "version_conflict",
            f"version conflict on key {shown!r}: expected {expected}, actual {actual}",
        )
        self.key = key
        self.expected = expected
        self.actual = actual


def raise_for(status: int, error: str, message: str, doc: Any) -> NoReturn:
    if status == 412 and isinstance(doc, dict):
        raise VersionConflict(doc.get("key"), doc.get("expected"), doc.get("actual"))
    raise EventStoreError(status, error, message, doc)
