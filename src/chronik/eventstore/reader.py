"""Reading a key: its events by version, a page at a time, and its version count and
partition."""

from __future__ import annotations

from chronik.eventstore.encoding import decoded
from chronik.eventstore.events import Event
from chronik.eventstore.transport import HttpTransport, key_path

# Events asked for per request; the broker answers at most 1000 a page.
PAGE = 1000


def read_events(
    http: HttpTransport,
    topic: str,
    key: str | bytes,
    from_version: int = 0,
    limit: int | None = None,
    decode: bool = False,
) -> list[Event]:
    out: list[Event] = []
    next_version: int | None = max(0, from_version)
    while next_version is not None and (limit is None or len(out) < limit):
        page = PAGE if limit is None else min(PAGE, limit - len(out))
        path = key_path(topic, key, events=True)
        sep = "&" if "?" in path else "?"
        query = f"from_version={next_version}&limit={page}" + ("&decode=true" if decode else "")
        _, doc, _ = http.request("GET", f"{path}{sep}{query}")
        for e in doc["events"]:
            out.append(
                Event(
                    e["version"],
                    e["offset"],
                    e["partition"],
                    e["timestamp"],
                    decoded(e["key"], e.get("key_encoding")),
                    decoded(e["value"], e["value_encoding"]),
                    [(h["key"], decoded(h["value"], h["value_encoding"])) for h in e["headers"]],
                    e.get("schema_id"),
                    e.get("value_json"),
                )
            )
        next_version = doc["next_version"]
    return out if limit is None else out[:limit]


def version_count(http: HttpTransport, topic: str, key: str | bytes) -> int:
    _, doc, _ = http.request("GET", key_path(topic, key))
    return int(doc["version_count"])


def partition_of(http: HttpTransport, topic: str, key: str | bytes) -> int:
    _, doc, _ = http.request("GET", key_path(topic, key))
    return int(doc["partition"])
