"""ACLs in a two-broker cluster: they live in ZooKeeper's /kafka-acl znodes exactly as
Kafka's ZooKeeper mode keeps them, a change made through one broker applies on the other
within about a second (its change notice), a restarted broker reads them back, and with
ZooKeeper away CreateAcls answers an error code.

Requests meant for one broker go over a raw connection to it (an admin client picks any
broker it knows); confluent-kafka's AdminClient does the rest. Both brokers have a
SASL_PLAINTEXT listener where alice (PLAIN) is checked; the PLAINTEXT listener is
User:ANONYMOUS, a super user."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from conftest import free_port, start_zookeeper

from .cluster_support import Cluster, wait_until
from .helpers import RawClient, code, nested, req

ALICE, ALICE_PASSWORD = "alice", "alice-Secret-1"
# Kafka's wire codes.
TOPIC, CLUSTER, ANY = 2, 4, 1
LITERAL, PREFIXED = 3, 4
READ, WRITE, DESCRIBE = 3, 4, 8
DENY, ALLOW = 2, 3
CLUSTER_AUTHORIZATION_FAILED = 31
REQUEST_TIMED_OUT = 7
# A change reaches the other broker within about a second.
PROPAGATION = 3.0


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Cluster, dict]]:
    """A ZooKeeper of this module's own (the last test stops it) and two brokers."""
    base: Path = tmp_path_factory.mktemp("acl-cluster")
    zk = start_zookeeper(base / "zookeeper")
    cluster = Cluster(base / "cluster", zk.connect, 2)
    sasl_ports: dict[int, int] = {}
    for i, broker in cluster.brokers.items():
        sasl_ports[i] = free_port()
        broker.config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{sasl_ports[i]}",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "authorizer.class.name": "chronik",
            "super.users": "User:ANONYMOUS",
            "connection.failed.authentication.delay.ms": "0",
        })
    try:
        cluster.start()
        upsert = UserScramCredentialUpsertion(
            ALICE, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), ALICE_PASSWORD.encode()
        )
        for future in cluster.admin(1).alter_user_scram_credentials([upsert]).values():
            future.result(30)
        yield zk, cluster, sasl_ports
    finally:
        cluster.close()
        zk.stop()


# -- one broker, over the wire ------------------------------------------------------


def creation(rtype: int, name: str, pattern: int, op: int, perm: int) -> Any:
    return nested(30, 3, "AclCreation", resource_type=rtype, resource_name=name,
                  resource_pattern_type=pattern, principal=f"User:{ALICE}", host="*",
                  operation=op, permission_type=perm)


def create_on(bootstrap: str, *creations: Any) -> list[int]:
    with RawClient(bootstrap) as raw:
        response = raw.request(req(30, 3, creations=tuple(creations)))
    return [code(r.error_code) for r in response.results]


def describe(raw: RawClient) -> tuple[int, set[tuple]]:
    """Every binding a broker holds, as (type, name, pattern, principal, host, op, perm)."""
    response = raw.request(req(
        29, 3, resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY,
        principal_filter=None, host_filter=None, operation=ANY, permission_type=ANY,
    ))
    found = {
        (code(r.resource_type), r.resource_name, code(r.pattern_type), a.principal, a.host,
         code(a.operation), code(a.permission_type))
        for r in response.resources
        for a in r.acls
    }
    return code(response.error_code), found


def acls_on(bootstrap: str) -> set[tuple]:
    with RawClient(bootstrap) as raw:
        error, found = describe(raw)
    assert error == 0
    return found


def delete_on(bootstrap: str, rtype: int, name: str, pattern: int) -> list[list[tuple]]:
    selector = nested(31, 3, "DeleteAclsFilter", resource_type_filter=rtype,
                      resource_name_filter=name, pattern_type_filter=pattern,
                      principal_filter=None, host_filter=None, operation=ANY,
                      permission_type=ANY)
    with RawClient(bootstrap) as raw:
        response = raw.request(req(31, 3, filters=(selector,)))
    out = []
    for result in response.filter_results:
        assert code(result.error_code) == 0
        out.append([(code(m.resource_type), m.resource_name, code(m.operation))
                    for m in result.matching_acls])
    return out


def alice_describes(port: int) -> int:
    """The error code of alice's DescribeAcls on one broker's SASL_PLAINTEXT listener."""
    with RawClient(f"127.0.0.1:{port}") as raw:
        assert code(raw.request(req(17, 1, mechanism="PLAIN")).error_code) == 0
        token = f"\0{ALICE}\0{ALICE_PASSWORD}".encode()
        assert code(raw.request(req(36, 1, auth_bytes=token)).error_code) == 0
        return describe(raw)[0]


def row(rtype: int, name: str, pattern: int, op: int, perm: int) -> tuple:
    return (rtype, name, pattern, f"User:{ALICE}", "*", op, perm)


def within(predicate: Any, what: str, timeout: float = PROPAGATION) -> float:
    started = time.monotonic()
    wait_until(predicate, what, timeout, interval=0.05)
    return time.monotonic() - started


# -- the tests, in order -------------------------------------------------------------


def test_acls_made_with_admin_client_are_kafkas_znodes_on_every_broker(acl_cluster) -> None:
    _, cluster, _ = acl_cluster
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                   f"User:{ALICE}", "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED,
                   f"User:{ALICE}", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                   f"User:{ALICE}", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]
    for future in cluster.admin(1).create_acls(bindings, request_timeout=10).values():
        future.result()
    wanted = {
        row(TOPIC, "orders", LITERAL, READ, ALLOW),
        row(TOPIC, "logs-", PREFIXED, WRITE, ALLOW),
        row(CLUSTER, "kafka-cluster", LITERAL, DESCRIBE, ALLOW),
    }
    for i in (1, 2):
        within(lambda i=i: acls_on(cluster.broker(i).bootstrap) == wanted, f"broker {i}'s ACLs")
    described = cluster.admin(2).describe_acls(
        AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                         AclOperation.ANY, AclPermissionType.ANY),
        request_timeout=10,
    ).result()
    assert {(b.name, b.operation) for b in described} == {
        ("orders", AclOperation.READ), ("logs-", AclOperation.WRITE),
        ("kafka-cluster", AclOperation.DESCRIBE),
    }

    zk = cluster.zk
    assert zk.get("/kafka-acl/Topic/orders")[0] == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"Read","host":"*"}]}'
    )
    assert zk.get("/kafka-acl/Cluster/kafka-cluster")[0] == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"Describe","host":"*"}]}'
    )
    assert zk.get("/kafka-acl-extended/prefixed/Topic/logs-")[0] == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"Write","host":"*"}]}'
    )
    assert not zk.exists("/kafka-acl/Topic/logs-")
    # What Kafka's authorizer creates at start.
    assert set(zk.get_children("/kafka-acl")) >= {"Topic", "Group", "Cluster", "TransactionalId"}
    literal = [zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")]
    assert sorted(literal) == [b"CLUSTER:kafka-cluster", b"TOPIC:orders"]
    names = zk.get_children("/kafka-acl-extended-changes")
    assert all(n.startswith("acl_changes_") and len(n) == len("acl_changes_") + 10 for n in names)
    extended = [zk.get(f"/kafka-acl-extended-changes/{c}")[0] for c in names]
    assert extended == [
        b'{"version":1,"resourceType":"TOPIC","name":"logs-","patternType":"PREFIXED"}'
    ]
    # alice may describe the ACLs on either broker (ALLOW Describe on the cluster).
    assert alice_describes(acl_cluster[2][2]) == 0


def test_change_through_one_broker_decides_on_the_other(acl_cluster) -> None:
    _, cluster, sasl_ports = acl_cluster
    b1, b2 = cluster.broker(1).bootstrap, cluster.broker(2).bootstrap
    assert alice_describes(sasl_ports[2]) == 0
    # A DENY made through broker 1 refuses alice at broker 2.
    assert create_on(b1, creation(CLUSTER, "kafka-cluster", LITERAL, DESCRIBE, DENY)) == [0]
    took = within(lambda: alice_describes(sasl_ports[2]) == CLUSTER_AUTHORIZATION_FAILED,
                  "alice refused at broker 2")
    assert took < PROPAGATION
    # Taken back through broker 2: allowed again at broker 1.
    removed = delete_on(b2, CLUSTER, "kafka-cluster", LITERAL)
    assert sorted(removed[0]) == [(CLUSTER, "kafka-cluster", DESCRIBE)] * 2
    assert not cluster.zk.exists("/kafka-acl/Cluster/kafka-cluster")
    assert create_on(b2, creation(CLUSTER, "kafka-cluster", LITERAL, DESCRIBE, ALLOW)) == [0]
    within(lambda: alice_describes(sasl_ports[1]) == 0, "alice allowed at broker 1")


def test_delete_through_broker_2_removes_everywhere_and_the_emptied_znode(acl_cluster) -> None:
    _, cluster, _ = acl_cluster
    b1, b2 = cluster.broker(1).bootstrap, cluster.broker(2).bootstrap
    assert create_on(b1, creation(TOPIC, "orders", LITERAL, WRITE, DENY)) == [0]
    within(lambda: row(TOPIC, "orders", LITERAL, WRITE, DENY) in acls_on(b2), "broker 2 sees it")
    assert len(json.loads(cluster.zk.get("/kafka-acl/Topic/orders")[0])["acls"]) == 2
    removed = delete_on(b2, TOPIC, "orders", LITERAL)
    assert sorted(removed[0]) == [(TOPIC, "orders", READ), (TOPIC, "orders", WRITE)]
    within(lambda: not any(r[1] == "orders" for r in acls_on(b1)), "gone on broker 1")
    assert not cluster.zk.exists("/kafka-acl/Topic/orders")
    assert cluster.zk.exists("/kafka-acl/Topic")
    # A filter matching nothing removes nothing and writes nothing.
    notices = len(cluster.zk.get_children("/kafka-acl-changes"))
    assert delete_on(b1, TOPIC, "orders", LITERAL) == [[]]
    assert len(cluster.zk.get_children("/kafka-acl-changes")) == notices


def test_concurrent_changes_through_both_brokers_all_land(acl_cluster) -> None:
    """Each broker reads, changes and writes back the same znode at the version read:
    a writer that lost the race reads again, so no binding is lost."""
    _, cluster, _ = acl_cluster
    hosts = [f"10.0.0.{n}" for n in range(12)]

    def make(n: int) -> list[int]:
        made = nested(30, 3, "AclCreation", resource_type=TOPIC, resource_name="shared",
                      resource_pattern_type=LITERAL, principal=f"User:{ALICE}",
                      host=hosts[n], operation=READ, permission_type=ALLOW)
        return create_on(cluster.broker(1 + n % 2).bootstrap, made)

    with ThreadPoolExecutor(len(hosts)) as pool:
        assert list(pool.map(make, range(len(hosts)))) == [[0]] * len(hosts)
    stored = json.loads(cluster.zk.get("/kafka-acl/Topic/shared")[0])["acls"]
    assert sorted(e["host"] for e in stored) == sorted(hosts)
    for i in (1, 2):
        within(lambda i=i: {r[4] for r in acls_on(cluster.broker(i).bootstrap)
                            if r[1] == "shared"} == set(hosts), f"broker {i} has all")
    assert len(delete_on(cluster.broker(2).bootstrap, TOPIC, "shared", LITERAL)[0]) == 12
    assert not cluster.zk.exists("/kafka-acl/Topic/shared")


def test_restarted_broker_reads_the_current_acls(acl_cluster) -> None:
    _, cluster, sasl_ports = acl_cluster
    assert cluster.stop(2) == 0
    # Made while broker 2 is down.
    assert create_on(cluster.broker(1).bootstrap,
                     creation(TOPIC, "payments", LITERAL, READ, ALLOW)) == [0]
    expected = acls_on(cluster.broker(1).bootstrap)
    assert row(TOPIC, "payments", LITERAL, READ, ALLOW) in expected
    cluster.start(2)
    assert acls_on(cluster.broker(2).bootstrap) == expected
    assert alice_describes(sasl_ports[2]) == 0


def test_zookeeper_away_create_acls_answers_an_error_code(acl_cluster) -> None:
    zk, cluster, _ = acl_cluster
    before = acls_on(cluster.broker(1).bootstrap)
    zk.stop()
    time.sleep(0.5)
    started = time.monotonic()
    errors = create_on(cluster.broker(1).bootstrap,
                       creation(TOPIC, "while-away", LITERAL, READ, ALLOW))
    assert errors == [REQUEST_TIMED_OUT]
    assert time.monotonic() - started < 10
    # The same through the admin client: an error, not a hang or a closed connection.
    binding = AclBinding(ResourceType.TOPIC, "while-away", ResourcePatternType.LITERAL,
                         f"User:{ALICE}", "*", AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        cluster.admin(1).create_acls([binding], request_timeout=10)[binding].result()
    assert refused.value.args[0].name() == "REQUEST_TIMED_OUT"
    # What the broker knows still decides and is still described.
    assert acls_on(cluster.broker(1).bootstrap) == before
    assert "Traceback" not in cluster.log_text(1)
