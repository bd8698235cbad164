"""Kafka's ACL model: bindings, filters, and the decision an authorizer makes.

The numeric codes are the wire's (CreateAcls, DescribeAcls, DeleteAcls); the names are
the ones Kafka writes in ZooKeeper's /kafka-acl znodes and prints in kafka-acls.

A binding allows or denies one principal (``User:NAME``, or ``User:*`` for everyone)
from one host (an address, or ``*``) one operation on the resources its pattern names:
LITERAL names one resource (or every one of the type with ``*``), PREFIXED every
resource whose name starts with it.

Decision, as Kafka's AclAuthorizer: a super user may do anything. Otherwise the bindings
whose pattern covers the resource are looked at; with none at all the answer is
``allow.everyone.if.no.acl.found``. A DENY for the principal and host on the operation
(or ALL) refuses. An ALLOW on the operation, on ALL, or on an operation that implies it
(READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS)
permits. Nothing else does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

E = TypeVar("E", bound=IntEnum)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# Kafka's spelling in ZooKeeper and in kafka-acls (CamelCase, as its SecurityUtils).
RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    op: "".join(part.capitalize() for part in op.name.split("_"))
    for op in Operation
    if op not in (Operation.UNKNOWN, Operation.ANY)
}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}
PATTERN_NAMES = {PatternType.LITERAL: "Literal", PatternType.PREFIXED: "Prefixed"}

# What an ALLOW on an operation also allows.
_IMPLIED_BY = {
    Operation.DESCRIBE: (
        Operation.DESCRIBE,
        Operation.READ,
        Operation.WRITE,
        Operation.DELETE,
        Operation.ALTER,
    ),
    Operation.DESCRIBE_CONFIGS: (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
}

# The operations each resource type has (Kafka's authorized-operations bit sets).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class AclError(ValueError):
    """A binding or filter that cannot be: its text says why."""


def _by_name(enum: type[IntEnum], names: dict, text: str, what: str) -> int:
    wanted = text.replace("-", "").replace("_", "").lower()
    for member, name in names.items():
        if name.lower() == wanted:
            return member
    for member in enum:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise AclError(f"unknown {what} {text!r}")


def resource_type_named(text: str) -> ResourceType:
    return ResourceType(_by_name(ResourceType, RESOURCE_NAMES, text, "resource type"))


def operation_named(text: str) -> Operation:
    return Operation(_by_name(Operation, OPERATION_NAMES, text, "operation"))


def permission_named(text: str) -> Permission:
    return Permission(_by_name(Permission, PERMISSION_NAMES, text, "permission type"))


def pattern_named(text: str) -> PatternType:
    return PatternType(_by_name(PatternType, PATTERN_NAMES, text, "pattern type"))


def valid_principal(principal: str) -> bool:
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


def _member(enum: type[E], value: int, what: str) -> E:
    try:
        return enum(int(value))
    except ValueError:
        raise AclError(f"unknown {what} code {value}") from None


@dataclass(frozen=True, slots=True)
class Acl:
    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    @classmethod
    def from_wire(cls, creation: Any) -> Acl:
        """From a CreateAcls creation."""
        return cls(
            _member(ResourceType, creation.resource_type, "resource type"),
            creation.resource_name,
            _member(PatternType, getattr(creation, "resource_pattern_type", 3), "pattern type"),
            creation.principal,
            creation.host,
            _member(Operation, creation.operation, "operation"),
            _member(Permission, creation.permission_type, "permission type"),
        )

    def check(self) -> None:
        """Raise AclError unless this binding can be stored (Kafka's checks on create)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError("an ACL needs a concrete resource type")
        if self.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("an ACL's pattern type is LITERAL or PREFIXED")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError("an ACL needs a concrete operation")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError("an ACL's permission is ALLOW or DENY")
        if not self.name:
            raise AclError("an ACL's resource name cannot be empty")
        if self.pattern is PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a PREFIXED ACL cannot have the wildcard name '*'")
        if self.resource_type is ResourceType.CLUSTER and (
            self.name != CLUSTER_NAME or self.pattern is not PatternType.LITERAL
        ):
            raise AclError(f"the cluster resource is LITERAL {CLUSTER_NAME!r}")
        if not valid_principal(self.principal):
            raise AclError(f"invalid principal {self.principal!r} (expected TYPE:NAME)")
        if not self.host:
            raise AclError("an ACL's host cannot be empty (use '*' for any host)")
        ops = SUPPORTED_OPERATIONS.get(self.resource_type)
        if ops is not None and self.operation is not Operation.ALL and self.operation not in ops:
            raise AclError(
                f"operation {OPERATION_NAMES[self.operation]} does not apply to "
                f"{RESOURCE_NAMES[self.resource_type]} resources"
            )

    def covers(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.pattern is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def describe(self) -> str:
        """One line, as kafka-acls prints a binding."""
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission.name}) on "
            f"{RESOURCE_NAMES.get(self.resource_type, '?')}:{self.pattern.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: ANY and None match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    @classmethod
    def from_wire(cls, request: Any) -> AclFilter:
        """From a DescribeAcls request or a DeleteAcls filter (their fields are the same)."""
        return cls(
            _member(ResourceType, request.resource_type_filter, "resource type"),
            request.resource_name_filter,
            _member(PatternType, getattr(request, "pattern_type_filter", 3), "pattern type"),
            request.principal_filter,
            request.host_filter,
            _member(Operation, request.operation, "operation"),
            _member(Permission, request.permission_type, "permission type"),
        )

    def check(self) -> None:
        for value, what in (
            (self.resource_type, "resource type"),
            (self.pattern, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:
                raise AclError(f"a filter cannot match an UNKNOWN {what}")

    def matches(self, acl: Acl) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            acl.resource_type
        ):
            return False
        if self.pattern not in (PatternType.ANY, PatternType.MATCH, acl.pattern):
            return False
        if self.name is not None:
            if self.pattern in (PatternType.ANY, acl.pattern):
                if self.name != acl.name:
                    return False
            elif acl.pattern is PatternType.PREFIXED:
                if not self.name.startswith(acl.name):
                    return False
            elif acl.name not in (self.name, WILDCARD):
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not acl.operation:
            return False
        return self.permission is Permission.ANY or self.permission is acl.permission


def _applies(acl: Acl, principal: str, host: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)


def decide(
    acls: list[Acl],
    principal: str,
    host: str,
    operation: Operation,
    allow_if_none: bool,
) -> bool:
    """Whether ``acls`` (every binding that covers one resource) let the principal do
    the operation from the host."""
    if not acls:
        return allow_if_none
    for acl in acls:
        if (
            acl.permission is Permission.DENY
            and acl.operation in (operation, Operation.ALL)
            and _applies(acl, principal, host)
        ):
            return False
    allowing = _IMPLIED_BY.get(operation, (operation,))
    for acl in acls:
        if (
            acl.permission is Permission.ALLOW
            and (acl.operation is Operation.ALL or acl.operation in allowing)
            and _applies(acl, principal, host)
        ):
            return True
    return False
