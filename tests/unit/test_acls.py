"""Kafka's ACL model and the authorizer's decisions: implications, DENY first, patterns,
hosts, super users, the empty-ACL default, filters as DescribeAcls/DeleteAcls apply them,
and the data dir's ACL file (all or nothing on a full disk)."""

from __future__ import annotations

import asyncio
import errno
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronik.security.acl_model import (
    CLUSTER_NAME,
    Acl,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    decide,
    operation_named,
)
from chronik.security.acl_store import AclFile, apply_changes, from_json, to_json
from chronik.security.authorizer import Authorizer

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(
    op: Operation,
    name: str = "orders",
    *,
    kind: ResourceType = T,
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    host: str = "*",
    permission: Permission = ALLOW,
) -> Acl:
    return Acl(kind, name, pattern, principal, host, op, permission)


class Source:
    def __init__(self, *acls: Acl) -> None:
        self.acls = tuple(acls)
        self.generation = 0

    def set(self, *acls: Acl) -> None:
        self.acls = tuple(acls)
        self.generation += 1

    async def change(self, add: list[Acl], remove: list[AclFilter]) -> list[list[Acl]]:
        acls, removed = apply_changes(self.acls, add, remove)
        self.set(*acls)
        return removed


def authorizer(*acls: Acl, **settings: str) -> tuple[Authorizer, Source]:
    authz = Authorizer({"authorizer.class.name": "chronik", **settings})
    source = Source(*acls)
    authz.use(source)
    return authz, source


def test_implied_operations_allow_describe_but_not_the_reverse() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert decide([acl(op)], "User:alice", "h", Operation.DESCRIBE, False)
        assert not decide([acl(Operation.DESCRIBE)], "User:alice", "h", op, False)
    configs = [acl(Operation.ALTER_CONFIGS)]
    assert decide(configs, "User:alice", "h", Operation.DESCRIBE_CONFIGS, False)
    assert not decide([acl(Operation.READ)], "User:alice", "h", Operation.WRITE, False)
    assert decide([acl(Operation.ALL)], "User:alice", "h", Operation.WRITE, False)


def test_deny_wins_and_only_for_its_operation() -> None:
    acls = [acl(Operation.ALL), acl(Operation.WRITE, permission=DENY)]
    assert not decide(acls, "User:alice", "h", Operation.WRITE, False)
    assert decide(acls, "User:alice", "h", Operation.READ, False)
    # A DENY on DESCRIBE does not take back READ (Kafka checks DENY on the operation asked).
    acls = [acl(Operation.READ), acl(Operation.DESCRIBE, permission=DENY)]
    assert decide(acls, "User:alice", "h", Operation.READ, False)
    assert not decide(acls, "User:alice", "h", Operation.DESCRIBE, False)


def test_principal_and_host_matching() -> None:
    only_there = [acl(Operation.READ, host="10.0.0.1")]
    assert decide(only_there, "User:alice", "10.0.0.1", Operation.READ, False)
    assert not decide(only_there, "User:alice", "10.0.0.2", Operation.READ, False)
    everyone = [acl(Operation.READ, principal="User:*")]
    assert decide(everyone, "User:bob", "h", Operation.READ, False)
    assert not decide([acl(Operation.READ)], "User:bob", "h", Operation.READ, False)


def test_no_acl_for_a_resource_follows_allow_everyone() -> None:
    assert not decide([], "User:alice", "h", Operation.READ, False)
    assert decide([], "User:alice", "h", Operation.READ, True)
    # Some ACL on the resource, none for this principal: refused even with the default on.
    assert not decide([acl(Operation.READ)], "User:bob", "h", Operation.READ, True)


def test_patterns_cover_resources() -> None:
    authz, _ = authorizer(
        acl(Operation.READ, "team-", pattern=PRE),
        acl(Operation.WRITE, "*"),
        acl(Operation.DELETE, "orders"),
    )
    assert authz.authorize("User:alice", "h", Operation.READ, T, "team-a")
    assert not authz.authorize("User:alice", "h", Operation.READ, T, "team")
    assert not authz.authorize("User:alice", "h", Operation.READ, G, "team-a")
    assert authz.authorize("User:alice", "h", Operation.WRITE, T, "anything")
    assert authz.authorize("User:alice", "h", Operation.DELETE, T, "orders")
    assert not authz.authorize("User:alice", "h", Operation.DELETE, T, "orders2")


def test_super_users_and_disabled_authorizer() -> None:
    authz = Authorizer(
        {"authorizer.class.name": "chronik", "super.users": "User:admin; User:ops"}
    )
    authz.use(Source())
    assert authz.authorize("User:ops", "h", Operation.ALTER, C, CLUSTER_NAME)
    assert not authz.authorize("User:alice", "h", Operation.ALTER, C, CLUSTER_NAME)
    off = Authorizer({})
    assert not off.enabled
    assert off.authorize("User:ANONYMOUS", "h", Operation.ALTER, C, CLUSTER_NAME)


def test_a_change_applies_to_the_next_decision() -> None:
    authz, source = authorizer(acl(Operation.WRITE))
    assert authz.authorize("User:alice", "h", Operation.WRITE, T, "orders")
    source.set()
    assert not authz.authorize("User:alice", "h", Operation.WRITE, T, "orders")
    source.set(acl(Operation.WRITE))
    assert authz.authorize("User:alice", "h", Operation.WRITE, T, "orders")


def test_authorize_any_for_idempotent_producers() -> None:
    authz, source = authorizer(acl(Operation.WRITE, "logs-", pattern=PRE))
    assert authz.authorize_any("User:alice", "h", Operation.WRITE, T)
    assert not authz.authorize_any("User:bob", "h", Operation.WRITE, T)
    source.set(
        acl(Operation.WRITE, "logs-", pattern=PRE),
        acl(Operation.WRITE, "*", permission=DENY),
    )
    assert not authz.authorize_any("User:alice", "h", Operation.WRITE, T)
    source.set(
        acl(Operation.WRITE, "orders"),
        acl(Operation.WRITE, "ord", pattern=PRE, permission=DENY),
    )
    assert not authz.authorize_any("User:alice", "h", Operation.WRITE, T)


def test_authorized_operation_bits() -> None:
    authz, _ = authorizer(acl(Operation.READ))
    bits = authz.operations("User:alice", "h", T, "orders")
    assert bits == (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    assert Authorizer({}).operations("User:x", "h", G, "g") == sum(
        1 << op for op in (Operation.READ, Operation.DESCRIBE, Operation.DELETE)
    )


@pytest.mark.parametrize(
    "bad",
    [
        acl(Operation.READ, principal="alice"),
        acl(Operation.ANY),
        acl(Operation.READ, pattern=PatternType.MATCH),
        acl(Operation.READ, "*", pattern=PRE),
        acl(Operation.READ, "other", kind=C),
        acl(Operation.IDEMPOTENT_WRITE),
        acl(Operation.READ, permission=Permission.ANY),
        acl(Operation.READ, ""),
        acl(Operation.READ, host=""),
    ],
)
def test_bindings_kafka_refuses(bad: Acl) -> None:
    with pytest.raises(AclError):
        bad.check()


def test_filters_as_kafka_matches_them() -> None:
    literal, prefixed, wildcard = (
        acl(Operation.READ, "team-a"),
        acl(Operation.READ, "team-", pattern=PRE),
        acl(Operation.READ, "*"),
    )
    every = [literal, prefixed, wildcard]
    match = AclFilter(T, "team-a", PatternType.MATCH)
    assert [a for a in every if match.matches(a)] == every
    exact = AclFilter(T, "team-", PatternType.ANY)
    assert [a for a in every if exact.matches(a)] == [prefixed]
    assert [a for a in every if AclFilter(T, "team-a", LIT).matches(a)] == [literal]
    assert not AclFilter(G).matches(literal)
    assert AclFilter(principal="User:alice", operation=Operation.READ).matches(literal)
    assert not AclFilter(permission=DENY).matches(literal)


def test_names_as_kafka_spells_them() -> None:
    binding = acl(Operation.IDEMPOTENT_WRITE, CLUSTER_NAME, kind=C)
    assert to_json(binding) == {
        "resourceType": "Cluster",
        "patternType": "Literal",
        "name": CLUSTER_NAME,
        "principal": "User:alice",
        "permissionType": "Allow",
        "operation": "IdempotentWrite",
        "host": "*",
    }
    assert from_json(to_json(binding)) == binding
    assert operation_named("describe-configs") is Operation.DESCRIBE_CONFIGS
    assert operation_named("ClusterAction") is Operation.CLUSTER_ACTION


bindings = st.builds(
    Acl,
    st.sampled_from([T, G, ResourceType.TRANSACTIONAL_ID]),
    st.sampled_from(["a", "ab", "abc", "b", "*"]),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from(["*", "10.0.0.1"]),
    st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL]),
    st.sampled_from([ALLOW, DENY]),
)


@given(
    st.lists(bindings, max_size=12),
    st.sampled_from(["a", "ab", "abc", "b", "zz"]),
    st.sampled_from([Operation.READ, Operation.WRITE, Operation.DESCRIBE]),
)
def test_indexed_decisions_equal_a_scan_of_every_binding(
    acls: list[Acl], name: str, op: Operation
) -> None:
    authz, _ = authorizer(*acls)
    covering = [a for a in acls if a.covers(T, name)]
    assert authz.authorize("User:alice", "10.0.0.1", op, T, name) == decide(
        covering, "User:alice", "10.0.0.1", op, False
    )


@given(st.lists(bindings, max_size=10), st.lists(bindings, max_size=3))
def test_removing_what_a_filter_matches_leaves_nothing_it_matches(
    acls: list[Acl], targets: list[Acl]
) -> None:
    filters = [AclFilter(t.resource_type, t.name, t.pattern, t.principal) for t in targets]
    left, removed = apply_changes(acls, [], filters)
    assert not any(f.matches(a) for f in filters for a in left)
    assert set(left) | {a for r in removed for a in r} == set(acls)


def test_acl_file_survives_restart_and_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AclFile(tmp_path)
    asyncio.run(store.change([acl(Operation.READ), acl(Operation.WRITE, "x-", pattern=PRE)], []))
    assert store.generation == 1
    assert AclFile(tmp_path).acls == store.acls
    before = (tmp_path / "security" / "acls.json").read_bytes()

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("chronik.storage.diskio.write_all", full)
    with pytest.raises(OSError):
        asyncio.run(store.change([acl(Operation.DELETE)], []))
    assert (tmp_path / "security" / "acls.json").read_bytes() == before
    assert not list((tmp_path / "security").glob("*.tmp"))
    assert len(store.acls) == 2 and store.generation == 1
    monkeypatch.undo()
    removed = asyncio.run(store.change([], [AclFilter(T, "x-", PRE)]))
    assert [a.name for a in removed[0]] == ["x-"]
    assert json.loads((tmp_path / "security" / "acls.json").read_text())["acls"][0]["name"] == (
        "orders"
    )


def test_a_damaged_acl_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "security").mkdir()
    (tmp_path / "security" / "acls.json").write_text('{"acls": [{"name": 1}]}')
    with pytest.raises(AclError, match="not an ACL file"):
        AclFile(tmp_path)


def test_unknown_authorizer_settings_are_errors() -> None:
    with pytest.raises(AclError, match="authorizer.class.name"):
        Authorizer({"authorizer.class.name": "com.example.Custom"})
    with pytest.raises(AclError, match="allow.everyone"):
        Authorizer({"authorizer.class.name": "chronik", "allow.everyone.if.no.acl.found": "yes"})
