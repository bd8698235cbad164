"""`chronik acls add|list|remove`: ACL bindings, with kafka-acls.sh's options, sent over
the Kafka protocol (CreateAcls, DescribeAcls, DeleteAcls through confluent-kafka's
AdminClient), so they work against any broker with an authorizer.

A binding allows or denies one principal, from one host, one operation on the resources
a pattern names (a LITERAL name, `*` for every resource of the type, or a PREFIXED
name). `--producer` and `--consumer` expand to the bindings a producer or a consumer
needs, as kafka-acls expands them. Everything the user typed is checked before the
broker is contacted: a bad principal, operation or combination is a usage error (exit 2).

`remove` asks no question (kafka-acls does, unless `--force`): it deletes what its
filters match and prints each binding it deleted. Without `--operation` it matches
every operation, without a host every host, and without a principal every principal on
the resource.

librdkafka drops the error code of a DescribeAcls answer (a broker without an
authorizer, or a principal refused DESCRIBE on the cluster, reads as an empty list), so
an empty listing is explained by asking again: a DeleteAcls whose filter can match no
binding (PREFIXED `*`, which no broker stores) answers SECURITY_DISABLED without an
authorizer and CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster. A principal
that may DESCRIBE but not ALTER the cluster is allowed by a cluster binding the listing
of every ACL would show, so an empty listing of every ACL plus that refusal means the
listing itself was refused.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclBindingFilter

from chronik.cli.args import add_bootstrap
from chronik.cli.clients import OPERATION_TIMEOUT, Cluster
from chronik.cli.errors import CliError, describe_kafka_error
from chronik.security.acl_model import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    SUPPORTED_OPERATIONS,
    Acl,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    operation_named,
    valid_principal,
)

NO_AUTHORIZER = "the broker has no authorizer (set authorizer.class.name)"
# The operations kafka-acls takes (and confluent-kafka can send).
OPERATIONS = (
    Operation.READ,
    Operation.WRITE,
    Operation.CREATE,
    Operation.DELETE,
    Operation.ALTER,
    Operation.DESCRIBE,
    Operation.CLUSTER_ACTION,
    Operation.DESCRIBE_CONFIGS,
    Operation.ALTER_CONFIGS,
    Operation.IDEMPOTENT_WRITE,
    Operation.ALL,
)
PATTERNS = {
    "literal": PatternType.LITERAL,
    "prefixed": PatternType.PREFIXED,
    "any": PatternType.ANY,
    "match": PatternType.MATCH,
}
# A filter no stored binding can match: a PREFIXED pattern may not be named '*'.
PROBE = AclBindingFilter(
    int(ResourceType.TOPIC),
    "*",
    int(PatternType.PREFIXED),
    None,
    None,
    int(Operation.ANY),
    int(Permission.ANY),
)


def operation_arg(text: str) -> Operation:
    try:
        operation = operation_named(text.strip())
    except AclError:
        operation = None
    if operation not in OPERATIONS:
        names = ", ".join(OPERATION_NAMES[op] for op in OPERATIONS)
        raise argparse.ArgumentTypeError(f"unknown operation {text!r} (one of: {names})")
    return operation


def principal_arg(text: str) -> str:
    if not valid_principal(text):
        raise argparse.ArgumentTypeError(
            f"invalid principal {text!r} (expected TYPE:NAME, e.g. User:alice)"
        )
    return text


def _resource_options(
    parser: argparse.ArgumentParser, patterns: tuple[str, ...], default: str
) -> None:
    group = parser.add_argument_group("resources")
    group.add_argument(
        "--topic", action="append", default=[], metavar="NAME", help="a topic ('*': every topic)"
    )
    group.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="a consumer group ('*': every group)",
    )
    group.add_argument("--cluster", action="store_true", help="the cluster")
    group.add_argument(
        "--transactional-id",
        action="append",
        default=[],
        metavar="NAME",
        help="a transactional id ('*': every one)",
    )
    group.add_argument(
        "--resource-pattern-type",
        type=str.lower,
        choices=patterns,
        default=default,
        help=f"how the names match (default {default})",
    )


def _binding_options(
    parser: argparse.ArgumentParser, operation_default: str, host_default: str
) -> None:
    group = parser.add_argument_group("bindings")
    for kind in ("allow", "deny"):
        group.add_argument(
            f"--{kind}-principal",
            type=principal_arg,
            action="append",
            default=[],
            metavar="TYPE:NAME",
            help=f"principal to {kind}, e.g. User:alice; User:* is everyone (repeatable)",
        )
    for kind in ("allow", "deny"):
        group.add_argument(
            f"--{kind}-host",
            action="append",
            default=[],
            metavar="HOST",
            help=f"host the {kind} principals connect from (repeatable; default {host_default})",
        )
    group.add_argument(
        "--operation",
        type=operation_arg,
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        f"AlterConfigs, IdempotentWrite or All (repeatable; default {operation_default})",
    )
    group.add_argument(
        "--producer",
        action="store_true",
        help="Write, Describe and Create on the topics (Write and Describe on the "
        "transactional ids)",
    )
    group.add_argument(
        "--idempotent",
        action="store_true",
        help="with --producer: IdempotentWrite on the cluster",
    )
    group.add_argument(
        "--consumer",
        action="store_true",
        help="Read and Describe on the topics, Read on the groups",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    add = sub.add_parser("add", help="add ACL bindings")
    _resource_options(add, ("literal", "prefixed"), "literal")
    _binding_options(add, "All", "*")
    listing = sub.add_parser("list", help="print ACL bindings")
    _resource_options(listing, tuple(PATTERNS), "any")
    listing.add_argument(
        "--principal",
        type=principal_arg,
        action="append",
        default=[],
        metavar="TYPE:NAME",
        help="only bindings of this principal (repeatable)",
    )
    remove = sub.add_parser("remove", help="remove the ACL bindings that match")
    _resource_options(remove, tuple(PATTERNS), "literal")
    _binding_options(remove, "any", "any")
    remove.add_argument(
        "--force",
        action="store_true",
        help="accepted for kafka-acls scripts; remove never asks for confirmation",
    )
    for child in (add, listing, remove):
        add_bootstrap(child)


def _usage(message: str) -> CliError:
    return CliError(message, exit_code=2)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, n) for n in args.topic]
    named += [(ResourceType.GROUP, n) for n in args.group]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    named += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    for kind, name in named:
        if not name:
            raise _usage(f"a {kind.name.lower().replace('_', ' ')} name cannot be empty")
    return list(dict.fromkeys(named))


def _principals(args: argparse.Namespace, default_host: str | None):
    """(principal, permission, host) for each principal and host given."""
    triples: list[tuple[str, Permission, str | None]] = []
    for kind, permission in (("allow", Permission.ALLOW), ("deny", Permission.DENY)):
        principals = getattr(args, f"{kind}_principal")
        hosts = getattr(args, f"{kind}_host")
        if hosts and not principals:
            raise _usage(f"--{kind}-host needs --{kind}-principal")
        if any(not h for h in hosts):
            raise _usage(f"--{kind}-host cannot be empty (use '*' for any host)")
        for principal in dict.fromkeys(principals):
            for host in dict.fromkeys(hosts) if hosts else [default_host]:
                triples.append((principal, permission, host))
    return triples


def _check_convenience(args: argparse.Namespace) -> None:
    if args.idempotent and not args.producer:
        raise _usage("--idempotent goes with --producer")
    if not (args.producer or args.consumer):
        return
    which = (
        "--producer and --consumer"
        if args.producer and args.consumer
        else ("--producer" if args.producer else "--consumer")
    )
    for option, given in (
        ("--operation", args.operation),
        ("--deny-principal", args.deny_principal),
        ("--deny-host", args.deny_host),
        ("--cluster", args.cluster),
    ):
        if given:
            hint = " (--idempotent is IdempotentWrite on it)" if option == "--cluster" else ""
            raise _usage(f"{option} cannot be combined with {which}{hint}")
    if not args.topic:
        raise _usage(f"{which} needs --topic")
    if args.consumer and not args.group:
        raise _usage("--consumer needs --group")
    if args.group and not args.consumer:
        raise _usage("--group goes with --consumer")
    if args.transactional_id and not args.producer:
        raise _usage("--transactional-id goes with --producer")


Wanted = tuple[ResourceType, str, PatternType, Operation]


def _convenience(args: argparse.Namespace) -> list[Wanted]:
    """The (resource, pattern, operation) kafka-acls' --producer/--consumer stand for."""
    pattern = PATTERNS[args.resource_pattern_type]
    wanted: list[Wanted] = []
    if args.producer:
        for topic in args.topic:
            for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE):
                wanted.append((ResourceType.TOPIC, topic, pattern, op))
        for tid in args.transactional_id:
            for op in (Operation.WRITE, Operation.DESCRIBE):
                wanted.append((ResourceType.TRANSACTIONAL_ID, tid, pattern, op))
        if args.idempotent:
            cluster = (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            wanted.append((*cluster, Operation.IDEMPOTENT_WRITE))
    if args.consumer:
        for topic in args.topic:
            for op in (Operation.READ, Operation.DESCRIBE):
                wanted.append((ResourceType.TOPIC, topic, pattern, op))
        for group in args.group:
            wanted.append((ResourceType.GROUP, group, pattern, Operation.READ))
    return list(dict.fromkeys(wanted))


def _check_operations(resources: Iterable[ResourceType], operations: list[Operation]) -> None:
    """Kafka's validateOperation: every operation must apply to every resource named."""
    for kind in dict.fromkeys(resources):
        supported = SUPPORTED_OPERATIONS[kind]
        for op in operations:
            if op is not Operation.ALL and op not in supported:
                names = ", ".join(OPERATION_NAMES[o] for o in (*supported, Operation.ALL))
                raise _usage(
                    f"operation {OPERATION_NAMES[op]} does not apply to "
                    f"{kind.name} resources (they take {names})"
                )


def bindings_to_add(args: argparse.Namespace) -> list[Acl]:
    _check_convenience(args)
    if not (args.allow_principal or args.deny_principal):
        raise _usage("add needs --allow-principal or --deny-principal")
    triples = _principals(args, "*")
    if args.producer or args.consumer:
        wanted = _convenience(args)
    else:
        resources = _resources(args)
        if not resources:
            raise _usage("add needs --topic, --group, --cluster or --transactional-id")
        operations = list(dict.fromkeys(args.operation)) or [Operation.ALL]
        _check_operations((kind for kind, _ in resources), operations)
        pattern = PATTERNS[args.resource_pattern_type]
        wanted = [(kind, name, pattern, op) for kind, name in resources for op in operations]
    acls = [
        Acl(kind, name, pattern, principal, host or "*", op, permission)
        for kind, name, pattern, op in wanted
        for principal, permission, host in triples
    ]
    for acl in acls:
        try:
            acl.check()
        except AclError as exc:
            raise _usage(str(exc)) from None
    return list(dict.fromkeys(acls))


def filters_to_remove(args: argparse.Namespace) -> list[AclFilter]:
    _check_convenience(args)
    if args.producer or args.consumer:
        if not args.allow_principal:
            raise _usage("--producer/--consumer need --allow-principal")
        triples = _principals(args, "*")
        return list(
            dict.fromkeys(
                AclFilter(kind, name, pattern, principal, host, op, permission)
                for kind, name, pattern, op in _convenience(args)
                for principal, permission, host in triples
            )
        )
    resources = _resources(args)
    if not resources:
        raise _usage("remove needs --topic, --group, --cluster or --transactional-id")
    operations = list(dict.fromkeys(args.operation)) or [Operation.ANY]
    if args.operation:
        _check_operations((kind for kind, _ in resources), operations)
    pattern = PATTERNS[args.resource_pattern_type]
    triples = _principals(args, None) or [(None, Permission.ANY, None)]
    return list(
        dict.fromkeys(
            AclFilter(kind, name, pattern, principal, host, op, permission)
            for kind, name in resources
            for op in operations
            for principal, permission, host in triples
        )
    )


def filters_to_list(args: argparse.Namespace) -> list[AclFilter]:
    pattern = PATTERNS[args.resource_pattern_type]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    if not resources:
        resources = [(ResourceType.ANY, None)]
    principals: list[str | None] = list(dict.fromkeys(args.principal)) or [None]
    return [
        AclFilter(kind, name, pattern, principal)
        for kind, name in resources
        for principal in principals
    ]


# Between chronik's model and confluent-kafka's objects (the wire codes are the same).


def to_binding(acl: Acl) -> AclBinding:
    return AclBinding(
        int(acl.resource_type),
        acl.name,
        int(acl.pattern),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


def to_filter(selector: AclFilter) -> AclBindingFilter:
    return AclBindingFilter(
        int(selector.resource_type),
        selector.name,
        int(selector.pattern),
        selector.principal,
        selector.host,
        int(selector.operation),
        int(selector.permission),
    )


def from_binding(binding: AclBinding) -> Acl:
    return Acl(
        ResourceType(binding.restype.value),
        binding.name,
        PatternType(binding.resource_pattern_type.value),
        binding.principal,
        binding.host,
        Operation(binding.operation.value),
        Permission(binding.permission_type.value),
    )


def pattern_text(acl: Acl) -> str:
    return (
        f"ResourcePattern(resourceType={acl.resource_type.name}, name={acl.name}, "
        f"patternType={acl.pattern.name})"
    )


def entry_text(acl: Acl) -> str:
    return (
        f"(principal={acl.principal}, host={acl.host}, operation={acl.operation.name}, "
        f"permissionType={acl.permission.name})"
    )


def print_grouped(heading: str, acls: Iterable[Acl]) -> None:
    """kafka-acls' layout: a line per resource pattern, then a tab-indented line per
    binding, a blank line between resources."""
    groups: dict[tuple[int, int, str], list[Acl]] = {}
    for acl in dict.fromkeys(acls):
        groups.setdefault((acl.resource_type, acl.pattern, acl.name), []).append(acl)
    for index, key in enumerate(sorted(groups)):
        members = sorted(
            groups[key], key=lambda a: (a.principal, a.permission, a.operation, a.host)
        )
        if index:
            print()
        print(f"{heading} {pattern_text(members[0])}:")
        for acl in members:
            print(f"\t{entry_text(acl)}")


class _Failed(Exception):
    """One binding or filter the broker refused (the others may have gone through)."""


def _result(future: Any, what: str, needs: str) -> Any:
    """An admin future's result. No authorizer, or no right to the ACLs at all, is one
    CliError for the whole command; any other refusal is a _Failed for this item."""
    try:
        return future.result(timeout=OPERATION_TIMEOUT)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        if code == KafkaError.SECURITY_DISABLED:
            raise CliError(NO_AUTHORIZER) from None
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise CliError(
                f"not authorized to {what}: the principal needs {needs} on the cluster "
                "(CLUSTER_AUTHORIZATION_FAILED)"
            ) from None
        raise _Failed(describe_kafka_error(exc)) from None
    except TimeoutError:
        raise CliError(f"{what}: no answer within {OPERATION_TIMEOUT:g}s") from None


def run(args: argparse.Namespace) -> int:
    # Every mistake on the command line is found before the broker is contacted.
    if args.action == "add":
        work: Any = bindings_to_add(args)
    elif args.action == "remove":
        work = filters_to_remove(args)
    else:
        work = filters_to_list(args)
    cluster = Cluster.from_args(args)
    cluster.metadata()  # reached and authenticated within --connect-timeout, or one error
    if args.action == "add":
        return add(cluster, work)
    if args.action == "remove":
        return remove(cluster, work)
    return list_acls(cluster, work)


def add(cluster: Cluster, acls: list[Acl]) -> int:
    futures = cluster.admin.create_acls(
        [to_binding(acl) for acl in acls], request_timeout=OPERATION_TIMEOUT
    )
    added: list[Acl] = []
    failures: list[str] = []
    for binding, future in futures.items():
        acl = from_binding(binding)
        try:
            _result(future, "add ACLs", "ALTER")
        except _Failed as exc:
            failures.append(f"cannot add {entry_text(acl)} on {pattern_text(acl)}: {exc}")
        else:
            added.append(acl)
    print_grouped("Added ACLs for resource", added)
    return _report(failures)


def _describe(cluster: Cluster, selector: AclFilter) -> list[Acl]:
    future = cluster.admin.describe_acls(to_filter(selector), request_timeout=OPERATION_TIMEOUT)
    try:
        return [from_binding(b) for b in _result(future, "list ACLs", "DESCRIBE")]
    except _Failed as exc:
        raise CliError(f"cannot list ACLs: {exc}") from None


def list_acls(cluster: Cluster, filters: list[AclFilter]) -> int:
    found: list[Acl] = []
    for selector in filters:
        found.extend(_describe(cluster, selector))
    if not found:
        _explain_empty(cluster, filters != [AclFilter()])
    print_grouped("Current ACLs for resource", found)
    return 0


def _explain_empty(cluster: Cluster, filtered: bool) -> None:
    """Raise the reason an empty listing was empty, if it was not for want of ACLs
    (librdkafka reports neither SECURITY_DISABLED nor CLUSTER_AUTHORIZATION_FAILED
    of a DescribeAcls; see the module's comment)."""
    if filtered and _describe(cluster, AclFilter()):
        return  # the listing was allowed, and nothing matched
    futures = cluster.admin.delete_acls([PROBE], request_timeout=OPERATION_TIMEOUT)
    for future in futures.values():
        # Any other answer says nothing about the listing.
        with contextlib.suppress(_Failed):
            _result(future, "list ACLs", "DESCRIBE")


def remove(cluster: Cluster, filters: list[AclFilter]) -> int:
    futures = cluster.admin.delete_acls(
        [to_filter(f) for f in filters], request_timeout=OPERATION_TIMEOUT
    )
    removed: list[Acl] = []
    failures: list[str] = []
    for _, future in futures.items():
        try:
            removed.extend(from_binding(b) for b in _result(future, "remove ACLs", "ALTER"))
        except _Failed as exc:
            failures.append(f"cannot remove ACLs: {exc}")
    if removed:
        print_grouped("Removed ACLs for resource", removed)
    elif not failures:
        print("No ACLs matched; nothing removed.", file=sys.stderr)
    return _report(failures)


def _report(failures: list[str]) -> int:
    """Each refusal as its own error line; the last one ends the command."""
    if not failures:
        return 0
    for line in failures[:-1]:
        print(f"chronik: error: {line}", file=sys.stderr)
    raise CliError(failures[-1])
