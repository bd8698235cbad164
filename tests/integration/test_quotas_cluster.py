"""Client quotas in a cluster of two brokers: altered through one, in ZooKeeper as Kafka's
ZooKeeper mode keeps them (beside a user's SCRAM credentials, which stay as they were),
with change notices, and seen by the other, which follows the notices."""

from __future__ import annotations

from typing import Any

import pytest

from chronik.cluster.users import read_users, write_users

from .test_quotas import alter, describe, described, entity


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from integration.cluster_support import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("quota-cluster"), zookeeper.connect, 2)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def test_quotas_through_zookeeper(cluster: Any) -> None:
    one, two = cluster.broker(1).bootstrap, cluster.broker(2).bootstrap
    credential = "salt=c2FsdA==,stored_key=a2V5,server_key=c2VydmVy,iterations=4096"
    write_users(cluster.zk, [("ivy", "SCRAM-SHA-256", credential)])
    assert alter(
        one,
        [
            (entity(1, user="ivy"), {"producer_byte_rate": 1024}),
            (entity(1, user="ivy", client="job 1"), {"consumer_byte_rate": 2048}),
            (entity(1, client=None), {"producer_byte_rate": 4096}),
        ],
    ) == [(0, None)] * 3
    assert cluster.get_json("/config/users/ivy") == {
        "version": 1,
        "config": {"SCRAM-SHA-256": credential, "producer_byte_rate": "1024"},
    }
    assert cluster.get_json("/config/users/ivy/clients/job%201")["config"] == {
        "consumer_byte_rate": "2048"
    }
    assert cluster.get_json("/config/clients/<default>")["config"] == {
        "producer_byte_rate": "4096"
    }
    notices = [
        cluster.get_json(f"/config/changes/{c}") for c in cluster.children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "users/ivy/clients/job%201"} in notices
    # The credentials are still only credentials.
    assert read_users(cluster.zk)["ivy"] == {"SCRAM-SHA-256": credential}

    def seen_by_two() -> bool:
        return len(described(describe(two, [], strict=False))) == 3

    cluster.wait_until(seen_by_two, "the quotas on broker 2", timeout=10)
    assert described(describe(two, [("user", 0, "ivy")], strict=False)) == {
        (("user", "ivy"),): {"producer_byte_rate": 1024.0},
        (("user", "ivy"), ("client-id", "job 1")): {"consumer_byte_rate": 2048.0},
    }
    # Removed through the other broker: gone on both, the credential kept.
    assert alter(two, [(entity(1, user="ivy"), {"producer_byte_rate": None})]) == [(0, None)]
    cluster.wait_until(
        lambda: described(describe(one, [("user", 0, "ivy")], strict=True)) == {},
        "the removal on broker 1",
        timeout=10,
    )
    assert cluster.get_json("/config/users/ivy")["config"] == {"SCRAM-SHA-256": credential}
