"""Whether a principal may do an operation on a resource, with Kafka's settings:
`authorizer.class.name` (set: ACLs are checked), `super.users` (semicolon-separated
principals that may do anything) and `allow.everyone.if.no.acl.found` (false).

The bindings come from a source (the data dir's file, or the cluster's copy of ZooKeeper's
/kafka-acl) that counts its changes in ``generation``; decisions are cached until it
changes, so a request pays a dictionary lookup per resource, and a change applies to
the next request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from chronik.security.acl_model import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    Acl,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    decide,
)

# The names accepted for authorizer.class.name: Kafka's two authorizers and chronik's.
AUTHORIZERS = (
    "chronik",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)
KEYS = ("authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found")
CACHE_LIMIT = 100_000


class AclSource(Protocol):
    acls: tuple[Acl, ...]
    generation: int

    async def change(self, add: list[Acl], remove: list[Any]) -> list[list[Acl]]: ...


class Authorizer:
    def __init__(self, values: Mapping[str, str]) -> None:
        name = values.get("authorizer.class.name", "").strip()
        if name and name not in AUTHORIZERS:
            raise AclError(
                f"authorizer.class.name {name} is not served (use one of: "
                f"{', '.join(AUTHORIZERS)})"
            )
        self.enabled = bool(name)
        self.super_users = frozenset(
            p.strip() for p in values.get("super.users", "").split(";") if p.strip()
        )
        flag = values.get("allow.everyone.if.no.acl.found", "false").strip().lower()
        if flag not in ("true", "false"):
            raise AclError(f"allow.everyone.if.no.acl.found must be true or false, not {flag}")
        self.allow_if_none = flag == "true"
        self.source: AclSource | None = None
        self._generation = -1
        self._literal: dict[tuple[ResourceType, str], list[Acl]] = {}
        self._prefixed: dict[ResourceType, list[Acl]] = {}
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def use(self, source: AclSource) -> None:
        self.source = source
        self._generation = -1

    def _refresh(self) -> None:
        source = self.source
        generation = source.generation if source is not None else 0
        if generation == self._generation:
            return
        literal: dict[tuple[ResourceType, str], list[Acl]] = {}
        prefixed: dict[ResourceType, list[Acl]] = {}
        for acl in source.acls if source is not None else ():
            if acl.pattern is PatternType.PREFIXED:
                prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                literal.setdefault((acl.resource_type, acl.name), []).append(acl)
        self._literal, self._prefixed = literal, prefixed
        self._cache = {}
        self._generation = generation

    def covering(self, resource_type: ResourceType, name: str) -> list[Acl]:
        """Every binding whose pattern covers the resource."""
        self._refresh()
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        found.extend(a for a in self._prefixed.get(resource_type, ()) if name.startswith(a.name))
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        self._refresh()
        key = (principal, host, operation, resource_type, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = decide(
                self.covering(resource_type, name), principal, host, operation, self.allow_if_none
            )
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = answer
        return answer

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows the operation (Kafka's
        authorizeByResourceType, as for an idempotent producer's WRITE on any topic): an
        ALLOW for the principal that no DENY of the same reach takes back."""
        if not self.enabled or principal in self.super_users:
            return True
        self._refresh()
        everything = self.source.acls if self.source is not None else ()
        acls = [
            a
            for a in everything
            if a.resource_type is resource_type
            and a.principal in (principal, "User:*")
            and a.host in (host, WILDCARD)
            and a.operation in (operation, Operation.ALL)
        ]
        denied_all = any(
            a.permission is Permission.DENY
            and a.pattern is PatternType.LITERAL
            and a.name == WILDCARD
            for a in acls
        )
        if denied_all:
            return False
        for allow in acls:
            if allow.permission is not Permission.ALLOW:
                continue
            if allow.pattern is PatternType.LITERAL and allow.name != WILDCARD:
                if not self.authorize(principal, host, operation, resource_type, allow.name):
                    continue
                return True
            if not any(
                d.permission is Permission.DENY
                and d.pattern is PatternType.PREFIXED
                and allow.name.startswith(d.name)
                for d in acls
            ):
                return True
        if self.allow_if_none:
            return not any(a.resource_type is resource_type for a in everything)
        return False

    def operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's authorized-operations bit set: bit n for each operation code n the
        principal may do on the resource."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits
