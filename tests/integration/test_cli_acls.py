"""`chronik acls add|list|remove` against real brokers: one with an authorizer whose
super user is the plaintext principal (User:ANONYMOUS), one with no authorizer, and one
with an authorizer but no super user (so the CLI is refused)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from conftest import BrokerProcess

from .cli_support import chronik, free_port, ok, unique

ACL_CONFIG = {"authorizer.class.name": "chronik", "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    root: Path = tmp_path_factory.mktemp("cli-acls")
    started = SimpleNamespace(
        acl=BrokerProcess(root / "acl", ACL_CONFIG),
        plain=BrokerProcess(root / "plain"),
        locked=BrokerProcess(root / "locked", {"authorizer.class.name": "chronik"}),
    )
    every = [started.acl, started.plain, started.locked]
    try:
        for broker in every:
            broker.start(wait=False)
        for broker in every:
            broker.wait_ready()
        yield started
    finally:
        for broker in every:
            broker.kill()


@pytest.fixture(scope="module")
def bootstrap(brokers: SimpleNamespace) -> str:
    return brokers.acl.bootstrap


def described(bootstrap: str, principal: str | None = None) -> set[tuple]:
    """Every binding the broker holds (of one principal), read with confluent-kafka."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    selector = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        principal,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found: list[AclBinding] = admin.describe_acls(selector, request_timeout=10).result(timeout=15)
    return {
        (
            b.restype.name,
            b.name,
            b.resource_pattern_type.name,
            b.principal,
            b.host,
            b.operation.name,
            b.permission_type.name,
        )
        for b in found
    }


def header(kind: str, name: str, pattern: str = "LITERAL", verb: str = "Current") -> str:
    return (
        f"{verb} ACLs for resource ResourcePattern(resourceType={kind}, name={name}, "
        f"patternType={pattern}):"
    )


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (
        f"\t(principal={principal}, host={host}, operation={operation}, "
        f"permissionType={permission})"
    )


def test_add_list_remove_round_trip(bootstrap: str) -> None:
    topic, alice = unique("orders"), unique("User:alice")
    added = ok(
        "acls", "add", "--allow-principal", alice, "--operation", "read", "--operation",
        "Describe", "--topic", topic, bootstrap=bootstrap,
    )  # fmt: skip
    assert added.lines == [
        header("TOPIC", topic, verb="Added"),
        entry(alice, "READ"),
        entry(alice, "DESCRIBE"),
    ]
    listed = ok("acls", "list", "--topic", topic, bootstrap=bootstrap)
    assert listed.lines == [header("TOPIC", topic), entry(alice, "READ"), entry(alice, "DESCRIBE")]
    assert described(bootstrap, alice) == {
        ("TOPIC", topic, "LITERAL", alice, "*", "READ", "ALLOW"),
        ("TOPIC", topic, "LITERAL", alice, "*", "DESCRIBE", "ALLOW"),
    }

    removed = ok(
        "acls", "remove", "--topic", topic, "--allow-principal", alice, "--operation", "READ",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert removed.lines == [header("TOPIC", topic, verb="Removed"), entry(alice, "READ")]
    assert described(bootstrap, alice) == {
        ("TOPIC", topic, "LITERAL", alice, "*", "DESCRIBE", "ALLOW")
    }
    # Without a principal or operation, remove takes every binding on the resource.
    removed = ok("acls", "remove", "--topic", topic, "--force", bootstrap=bootstrap)
    assert removed.lines == [header("TOPIC", topic, verb="Removed"), entry(alice, "DESCRIBE")]
    assert described(bootstrap, alice) == set()

    empty = ok("acls", "list", "--topic", topic, bootstrap=bootstrap)
    assert empty.stdout == ""
    again = ok("acls", "remove", "--topic", topic, bootstrap=bootstrap)
    assert again.stdout == ""
    assert again.error_lines == ["No ACLs matched; nothing removed."]


def test_prefixed_and_deny(bootstrap: str) -> None:
    prefix, bob, eve = unique("pay") + "-", unique("User:bob"), unique("User:eve")
    ok(
        "acls", "add", "--topic", prefix, "--resource-pattern-type", "prefixed",
        "--allow-principal", bob, "--operation", "Write", bootstrap=bootstrap,
    )  # fmt: skip
    denied = ok(
        "acls", "add", "--topic", "*", "--deny-principal", eve, "--deny-host", "10.0.0.1",
        "--operation", "READ", bootstrap=bootstrap,
    )  # fmt: skip
    assert denied.lines == [
        header("TOPIC", "*", verb="Added"),
        entry(eve, "READ", "DENY", "10.0.0.1"),
    ]
    assert described(bootstrap, eve) == {("TOPIC", "*", "LITERAL", eve, "10.0.0.1", "READ", "DENY")}
    assert described(bootstrap, bob) == {("TOPIC", prefix, "PREFIXED", bob, "*", "WRITE", "ALLOW")}
    # `match`: every binding that applies to the topic, whatever its pattern.
    for principal, lines in (
        (bob, [header("TOPIC", prefix, "PREFIXED"), entry(bob, "WRITE")]),
        (eve, [header("TOPIC", "*"), entry(eve, "READ", "DENY", "10.0.0.1")]),
    ):
        matched = ok(
            "acls", "list", "--topic", prefix + "orders", "--resource-pattern-type", "match",
            "--principal", principal, bootstrap=bootstrap,
        )  # fmt: skip
        assert matched.lines == lines
    # The prefixed binding is removed by its own pattern, not by a literal name.
    literal = ok("acls", "remove", "--topic", prefix, bootstrap=bootstrap)
    assert literal.stdout == ""
    ok(
        "acls", "remove", "--topic", prefix, "--resource-pattern-type", "prefixed",
        bootstrap=bootstrap,
    )  # fmt: skip
    ok("acls", "remove", "--topic", "*", "--deny-principal", eve, bootstrap=bootstrap)
    assert described(bootstrap, bob) == described(bootstrap, eve) == set()


def test_producer_and_consumer_expansion(bootstrap: str) -> None:
    topic, group, tid = unique("events"), unique("billing"), unique("tx")
    writer, reader = unique("User:writer"), unique("User:reader")
    ok(
        "acls", "add", "--producer", "--idempotent", "--transactional-id", tid, "--topic", topic,
        "--allow-principal", writer, bootstrap=bootstrap,
    )  # fmt: skip
    ok(
        "acls", "add", "--consumer", "--topic", topic, "--group", group,
        "--allow-principal", reader, bootstrap=bootstrap,
    )  # fmt: skip

    def ops(principal: str) -> set[tuple[str, str, str]]:
        return {(kind, name, op) for kind, name, _, _, _, op, _ in described(bootstrap, principal)}

    assert ops(writer) == {
        ("TOPIC", topic, "WRITE"),
        ("TOPIC", topic, "DESCRIBE"),
        ("TOPIC", topic, "CREATE"),
        ("TRANSACTIONAL_ID", tid, "WRITE"),
        ("TRANSACTIONAL_ID", tid, "DESCRIBE"),
        ("BROKER", "kafka-cluster", "IDEMPOTENT_WRITE"),  # confluent-kafka's name for CLUSTER
    }
    assert ops(reader) == {
        ("TOPIC", topic, "READ"),
        ("TOPIC", topic, "DESCRIBE"),
        ("GROUP", group, "READ"),
    }
    removed = ok(
        "acls", "remove", "--producer", "--idempotent", "--transactional-id", tid,
        "--topic", topic, "--allow-principal", writer, bootstrap=bootstrap,
    )  # fmt: skip
    assert len([line for line in removed.lines if line.startswith("\t")]) == 6
    assert ops(writer) == set()
    ok(
        "acls", "remove", "--consumer", "--topic", topic, "--group", group,
        "--allow-principal", reader, bootstrap=bootstrap,
    )  # fmt: skip
    assert ops(reader) == set()


def test_list_filters_by_principal(bootstrap: str) -> None:
    topic, group = unique("audit"), unique("auditors")
    ann, ben = unique("User:ann"), unique("User:ben")
    for principal in (ann, ben):
        ok(
            "acls", "add", "--topic", topic, "--group", group, "--allow-principal", principal,
            "--operation", "Read", bootstrap=bootstrap,
        )  # fmt: skip
    everything = ok("acls", "list", bootstrap=bootstrap).lines
    assert entry(ann, "READ") in everything and entry(ben, "READ") in everything
    only_ann = ok("acls", "list", "--principal", ann, bootstrap=bootstrap)
    assert only_ann.lines == [
        header("TOPIC", topic),
        entry(ann, "READ"),
        "",
        header("GROUP", group),
        entry(ann, "READ"),
    ]
    one_resource = ok(
        "acls", "list", "--group", group, "--principal", ben, bootstrap=bootstrap
    )  # fmt: skip
    assert one_resource.lines == [header("GROUP", group), entry(ben, "READ")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["add", "--allow-principal", "alice", "--topic", "t"],
            "argument --allow-principal: invalid principal 'alice' (expected TYPE:NAME",
        ),
        (
            ["add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Frob"],
            "argument --operation: unknown operation 'Frob' (one of: Read, Write,",
        ),
        (
            ["add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"],
            "operation Write does not apply to GROUP resources",
        ),
        (["add", "--topic", "t"], "add needs --allow-principal or --deny-principal"),
        (["add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--group"),
        (
            ["add", "--allow-principal", "User:a", "--topic", "*", "--resource-pattern-type",
             "prefixed"],
            "a PREFIXED ACL cannot have the wildcard name '*'",
        ),
        (["remove", "--allow-principal", "User:a"], "remove needs --topic"),
        (["list", "--principal", "bob"], "invalid principal 'bob'"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_before_contacting_a_broker(args: list[str], message: str) -> None:
    # Nothing listens there: reaching for it would be a different error, exit 1.
    result = chronik("acls", *args, bootstrap=f"127.0.0.1:{free_port()}")
    assert result.returncode == 2, result.stderr
    assert len(result.error_lines) == 1
    assert result.error_lines[0].startswith("chronik: error: ")
    assert message in result.error_lines[0]


def test_broker_without_authorizer(brokers: SimpleNamespace) -> None:
    b = brokers.plain.bootstrap
    for args in (
        ["add", "--allow-principal", "User:a", "--topic", "t"],
        ["list"],
        ["list", "--topic", "t"],
        ["remove", "--topic", "t"],
    ):
        result = chronik("acls", *args, bootstrap=b)
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.error_lines == [
            "chronik: error: the broker has no authorizer (set authorizer.class.name)"
        ]


def test_principal_without_rights_on_the_cluster(brokers: SimpleNamespace) -> None:
    b = brokers.locked.bootstrap
    for args, what, needs in (
        (["add", "--allow-principal", "User:a", "--topic", "t"], "add", "ALTER"),
        (["list"], "list", "DESCRIBE"),
        (["remove", "--topic", "t"], "remove", "ALTER"),
    ):
        result = chronik("acls", *args, bootstrap=b)
        assert result.returncode == 1
        assert result.error_lines == [
            f"chronik: error: not authorized to {what} ACLs: the principal needs {needs} on "
            "the cluster (CLUSTER_AUTHORIZATION_FAILED)"
        ]


def test_unreachable_broker() -> None:
    port = free_port()
    result = chronik(
        "acls", "list", "--connect-timeout", "0.5", bootstrap=f"127.0.0.1:{port}"
    )  # fmt: skip
    assert result.returncode == 1
    assert result.error_lines == [
        f"chronik: error: cannot reach a broker at 127.0.0.1:{port} (no answer within 0.5s)"
    ]
