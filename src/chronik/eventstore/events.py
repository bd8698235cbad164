"""What reads and appends hand back: an event of a key, and where an append put its events."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

# The broker's header names (chronik.records.stamping), repeated so that a client loads
# none of the broker's modules: the version it stamps on every keyed record, and the
# version a Kafka-protocol append expects its key to be at.
VERSION_HEADER = "chronik-version"
EXPECTED_HEADER = "chronik-expected-version"


class Event(NamedTuple):
    version: int | None
    offset: int
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    # With read(..., decode=True), for a value in Confluent's wire format whose schema the
    # registry knows: its schema id, and the value decoded with it (None when it did not).
    schema_id: int | None = None
    value_json: Any = None

    def json(self) -> Any:
        """The value decoded as JSON."""
        return None if self.value is None else json.loads(self.value)

    def text(self) -> str | None:
        return None if self.value is None else self.value.decode("utf-8")


class Appended(NamedTuple):
    partition: int
    first_version: int
    versions: list[int]
    offsets: list[int]
