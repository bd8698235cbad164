"""Helpers for the schema registry's tests: a broker serving the registry, and raw HTTP
calls that show status, Confluent error code and content type."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(
    url: str,
    method: str = "GET",
    body: Any = None,
    content_type: str = CONTENT_TYPE,
    raw: bytes | None = None,
    timeout: float = 30,
) -> tuple[int, Any, str]:
    """(status, decoded JSON body or text, content type) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, payload, ctype = (
                response.status,
                response.read(),
                response.headers.get("Content-Type", ""),
            )
    except urllib.error.HTTPError as exc:
        status, payload, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
    try:
        return status, json.loads(payload), ctype
    except ValueError:
        return status, payload.decode(errors="replace"), ctype


def avro_record(name: str, *fields: tuple[str, Any] | tuple[str, Any, Any]) -> str:
    """An Avro record schema's text: fields as (name, type) or (name, type, default)."""
    out = []
    for field in fields:
        entry: dict[str, Any] = {"name": field[0], "type": field[1]}
        if len(field) == 3:
            entry["default"] = field[2]
        out.append(entry)
    return json.dumps({"type": "record", "name": name, "fields": out})


def wait_for_registry(url: str, timeout: float = 30) -> None:
    """Until the registry at ``url`` answers."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            if call(f"{url}/schemas/types", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no schema registry at {url} after {timeout:g} s")
        time.sleep(0.1)
