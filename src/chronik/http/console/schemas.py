"""The console's schemas: subjects, their versions, a diff between two versions and the
compatibility level, read in-process from the broker's schema registry
(chronik.registry.registry) after it caught up with ``_schemas``. As the registry's own
reads: DESCRIBE on the topic ``_schemas`` (checked by the caller). 404
``{"error": "no_registry"}`` when the broker serves no registry.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Protocol

from chronik.http.console.params import filter_text, int_param
from chronik.http.server import HttpError
from chronik.registry.errors import RegistryError

MAX_DIFF_LINES = 20_000


class Registry(Protocol):
    """What the console uses of chronik.registry.registry.SchemaRegistry."""

    async def catch_up(self, end: int | None = None) -> None: ...

    def list_schemas(self, prefix: str, deleted: bool, latest_only: bool) -> list[Any]: ...

    def versions(self, subject: str, deleted: bool, deleted_only: bool = False) -> list[int]: ...

    def version(self, subject: str, spec: str | int, deleted: bool = False) -> Any: ...

    def config(self, subject: str | None, default_to_global: bool) -> dict[str, Any]: ...


def no_registry() -> HttpError:
    return HttpError(404, "no_registry", "this broker serves no schema registry")


def _registry_error(exc: RegistryError) -> HttpError:
    return HttpError(exc.status if exc.status < 500 else 503, "registry", exc.message,
                     error_code=exc.code)


async def list_subjects(registry: Registry, query: dict[str, str]) -> dict[str, Any]:
    await registry.catch_up()
    offset = int_param(query, "offset", 0, 0, 2**31)
    limit = int_param(query, "limit", 50, 1, 500)
    q = filter_text(query)
    latest = [r for r in registry.list_schemas("", False, True) if q in r.subject.lower()]
    latest.sort(key=lambda r: r.subject)
    items = []
    for r in latest[offset : offset + limit]:
        try:
            versions = registry.versions(r.subject, False)
            level = registry.config(r.subject, True).get("compatibilityLevel")
        except RegistryError:
            continue
        items.append(
            {
                "subject": r.subject,
                "versions": versions,
                "latest_id": r.schema.schema_id,
                "type": r.schema.schema_type,
                "compatibility": level,
            }
        )
    return {"total": len(latest), "items": items}


def pretty(text: str, schema_type: str) -> str:
    """A schema's text pretty-printed: JSON (Avro, JSON Schema) indented, Protobuf as is."""
    if schema_type == "PROTOBUF":
        return text
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


async def schema_version(registry: Registry, subject: str, version: str) -> dict[str, Any]:
    await registry.catch_up()
    try:
        found = registry.version(subject, version)
    except RegistryError as exc:
        raise _registry_error(exc) from None
    return {
        "subject": subject,
        "version": found.version,
        "id": found.schema.schema_id,
        "type": found.schema.schema_type,
        "schema": pretty(found.schema.text, found.schema.schema_type),
    }


async def diff(registry: Registry, subject: str, query: dict[str, str]) -> dict[str, Any]:
    old = await schema_version(registry, subject, query.get("from") or "1")
    new = await schema_version(registry, subject, query.get("to") or "latest")
    lines = []
    matcher = difflib.ndiff(old["schema"].splitlines(), new["schema"].splitlines())
    for line in matcher:
        op = line[:1]
        if op == "?":
            continue
        lines.append({"op": op if op in "+-" else " ", "text": line[2:]})
        if len(lines) >= MAX_DIFF_LINES:
            break
    return {"from": old["version"], "to": new["version"], "lines": lines}


async def compatibility(registry: Registry, subject: str) -> dict[str, Any]:
    await registry.catch_up()
    try:
        registry.versions(subject, False)
        level = registry.config(subject, True).get("compatibilityLevel")
    except RegistryError as exc:
        raise _registry_error(exc) from None
    return {"subject": subject, "compatibility": level}
