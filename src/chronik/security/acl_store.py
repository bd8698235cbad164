"""The ACLs of a single broker, in its data dir.

File `<data-dir>/security/acls.json`, replaced whole (written beside, fsynced, renamed,
directory fsynced) on every change:

    {"version": 1,
     "acls": [{"resourceType": "Topic", "patternType": "Literal", "name": "orders",
               "principal": "User:alice", "host": "*", "operation": "Read",
               "permissionType": "Allow"}]}

Each entry's last four fields are the ones of an entry in Kafka's ZooKeeper znodes
(/kafka-acl/<Type>/<name>), spelt as Kafka spells them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chronik.security.acl_model import (
    OPERATION_NAMES,
    PATTERN_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    Acl,
    AclError,
    AclFilter,
    operation_named,
    pattern_named,
    permission_named,
    resource_type_named,
)
from chronik.storage.diskio import replace_file

FILE = Path("security") / "acls.json"


def entry_json(acl: Acl) -> dict[str, str]:
    """The part of a binding Kafka keeps inside a resource's znode."""
    return {
        "principal": acl.principal,
        "permissionType": PERMISSION_NAMES[acl.permission],
        "operation": OPERATION_NAMES[acl.operation],
        "host": acl.host,
    }


def entry_from_json(resource: tuple[Any, str, Any], entry: dict[str, Any]) -> Acl:
    resource_type, name, pattern = resource
    return Acl(
        resource_type,
        name,
        pattern,
        str(entry["principal"]),
        str(entry["host"]),
        operation_named(str(entry["operation"])),
        permission_named(str(entry["permissionType"])),
    )


def to_json(acl: Acl) -> dict[str, str]:
    return {
        "resourceType": RESOURCE_NAMES[acl.resource_type],
        "patternType": PATTERN_NAMES[acl.pattern],
        "name": acl.name,
        **entry_json(acl),
    }


def from_json(raw: dict[str, Any]) -> Acl:
    resource = (
        resource_type_named(str(raw["resourceType"])),
        str(raw["name"]),
        pattern_named(str(raw["patternType"])),
    )
    return entry_from_json(resource, raw)


def apply_changes(
    current: Iterable[Acl], add: Iterable[Acl], remove: Iterable[AclFilter]
) -> tuple[list[Acl], list[list[Acl]]]:
    """The bindings after adding ``add`` and removing what each filter matches, and what
    each filter matched (bindings added here included)."""
    acls = list(dict.fromkeys([*current, *add]))
    removed: list[list[Acl]] = []
    for selector in remove:
        matched = [acl for acl in acls if selector.matches(acl)]
        removed.append(matched)
        if matched:
            gone = set(matched)
            acls = [acl for acl in acls if acl not in gone]
    return acls, removed


class AclFile:
    """Every binding, read once and kept in memory; each change is written through
    before it is visible. ``generation`` counts changes, for the authorizer's cache."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE
        self._lock = threading.Lock()
        self.acls: tuple[Acl, ...] = tuple(self._read())
        self.generation = 0

    def _read(self) -> list[Acl]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise AclError(f"cannot read {self.path}: {exc}") from None
        try:
            return [from_json(entry) for entry in raw["acls"]]
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise AclError(f"{self.path} is not an ACL file: {exc}") from None

    async def change(self, add: list[Acl], remove: list[AclFilter]) -> list[list[Acl]]:
        """Add and remove in one write, all or none (OSError: nothing changed)."""
        with self._lock:
            acls, removed = apply_changes(self.acls, add, remove)
            if acls != list(self.acls):
                self._write(acls)
                self.acls = tuple(acls)
                self.generation += 1
            return removed

    def _write(self, acls: list[Acl]) -> None:
        body = {"version": 1, "acls": [to_json(acl) for acl in acls]}
        replace_file(self.path, json.dumps(body, indent=1).encode(), 0o600)
