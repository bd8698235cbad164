"""Aggregates in a three-broker cluster, through one broker: its console and its event
store API read and append keys whose partitions any broker leads, the request forwarded
to the leader's HTTP listener (as registered in ZooKeeper) and its answer passed back.

- An open cluster: through broker 1's console, a key led by each of the three brokers
  is appended to and read back (the records checked with a confluent-kafka consumer of
  the partition: offsets, values, chronik-version headers); a stale expected version is
  409 with the current version through the forward; the event store's own client
  (chronik.eventstore over broker 1's /v1) reads and appends the same keys; a request
  already forwarded is never forwarded again (421 naming the leader); a leader without an
  HTTP listener: the console says 503 naming it, the event store API 421.
- A secured cluster (SASL SCRAM, the ACL authorizer): the same through a logged-in
  session, the forward carrying the user's credentials (the leaders accept them), a user
  without READ refused; no password in any answer or broker log.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from chronik.eventstore import EventStore, VersionConflict
from chronik.records.partitioner import partition_for_key
from conftest import free_port

from .cluster_support import Cluster, wait_until
from .console_api_support import ConsoleClient, seg
from .replication_support import create_replicated_topic

PARTITIONS = 6
VERSIONED = {"key.versioning.enable": "true"}
PASSWORDS = {"alice": "alice-Fwd-Secret-1", "bob": "bob-Fwd-Hidden-2"}


def http_urls(cluster: Cluster) -> dict[int, str]:
    """Each broker's HTTP listener, as it registered it in ZooKeeper."""
    return {i: cluster.get_json(f"/brokers/ids/{i}").get("http_api") for i in cluster.running()}


def port_of(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None, url
    return port


def keys_led_by_each(cluster: Cluster, topic: str) -> dict[int, str]:
    """{broker: a key whose partition it leads}, one for each broker."""
    led = cluster.leaders(topic, via=1)
    found: dict[int, str] = {}
    for n in range(1000):
        key = f"acct-{n}"
        found.setdefault(led[partition_for_key(key.encode(), PARTITIONS)], key)
    assert sorted(found) == cluster.ids, led
    return found


def partition_records(bootstrap: str, topic: str, partition: int, count: int,
                      conf: dict[str, Any] | None = None) -> list[Any]:
    """The first ``count`` records of a partition, read by a confluent-kafka consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "enable.auto.commit": False, **(conf or {})})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg)
        return got
    finally:
        consumer.close()


def api_call(c: ConsoleClient, method: str, path: str, body: Any = None,
             query: dict[str, Any] | None = None) -> tuple[int, Any]:
    """A console call, retried while the cluster answers 503 (leaders still settling)."""
    deadline = time.monotonic() + 30
    while True:
        status, doc, _ = c.request(method, "/console/api/" + path, body, query)
        if status != 503 or time.monotonic() > deadline:
            return status, doc
        time.sleep(0.5)


def raw(port: int, method: str, path: str, body: Any = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        payload = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=payload, headers={
            "Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def read_and_append_everywhere(
    c: ConsoleClient, cluster: Cluster, topic: str, keys: dict[int, str],
    consumer_conf: dict[str, Any] | None = None,
) -> None:
    """Through one console: append two events to a key led by each broker, read them
    back, check them in the partition, and see a stale expected version refused."""
    for leader, key in keys.items():
        partition = partition_for_key(key.encode(), PARTITIONS)
        status, doc = api_call(c, "POST", f"aggregates/{topic}/{seg(key)}",
                               {"expected_version": 0,
                                "events": [{"value": f"opened by {leader}"},
                                           {"value": {"amount": leader}}]})
        assert status == 201, (leader, doc)
        assert (doc["partition"], doc["first_version"], doc["last_version"]) == (partition, 0, 1)
        offsets = doc["offsets"]
        found = c.get(f"aggregates/{topic}/{seg(key)}")
        assert (found["partition"], found["version_count"]) == (partition, 2), found
        assert [e["version"] for e in found["events"]] == [0, 1]
        assert [e["offset"] for e in found["events"]] == offsets
        assert found["events"][0]["value"] == f"opened by {leader}"
        assert json.loads(found["events"][1]["value"]) == {"amount": leader}
        assert found["events"][1]["value_format"] == "json"
        # A stale expectation, refused at the leader: the current version comes back.
        status, doc = api_call(c, "POST", f"aggregates/{topic}/{seg(key)}",
                               {"expected_version": 1, "events": [{"value": "late"}]})
        assert (status, doc["error"], doc["current_version"]) == (409, "version_conflict", 2)
        # The records are where the answers say, as a Kafka consumer reads them.
        records = [m for m in partition_records(cluster.bootstrap, topic, partition,
                                                max(offsets) + 1, consumer_conf)
                   if m.key() == key.encode()]
        assert [m.offset() for m in records] == offsets
        assert [dict(m.headers() or [])["chronik-version"] for m in records] == [b"0", b"1"]
        assert records[0].value() == f"opened by {leader}".encode()


# -- an open cluster -----------------------------------------------------------------------


def test_aggregates_of_every_leader_through_one_broker(cluster_factory: Any) -> None:
    cluster = cluster_factory(config={"http.listen": "127.0.0.1:0"})
    urls = http_urls(cluster)
    assert sorted(urls) == [1, 2, 3]
    assert all(u.startswith("http://127.0.0.1:") for u in urls.values()), urls
    topic = "fwd-open"
    create_replicated_topic(cluster, topic, PARTITIONS, rf=2, **VERSIONED)
    keys = keys_led_by_each(cluster, topic)
    c = ConsoleClient(port_of(urls[1]))
    c.session()
    read_and_append_everywhere(c, cluster, topic, keys)

    # The event store's own client, through broker 1 only, for keys any broker leads.
    store = EventStore(cluster.broker(1).bootstrap, urls[1])
    try:
        for leader, key in keys.items():
            appended = store.append(topic, key, [f"via store {leader}"], expected_version=2)
            assert appended.first_version == 2
            assert appended.partition == partition_for_key(key.encode(), PARTITIONS)
            events = store.read(topic, key)
            assert [e.version for e in events] == [0, 1, 2]
            assert events[2].value == f"via store {leader}".encode()
            assert store.version(topic, key) == 3
            try:
                store.append(topic, key, ["stale"], expected_version=2)
            except VersionConflict as conflict:
                assert conflict.actual == 3
            else:
                raise AssertionError("a stale append through the forward was taken")
    finally:
        store.close()

    # A request that was forwarded already is answered where it lands: 421, no second hop.
    remote_leader = next(b for b in keys if b != 1)
    key = keys[remote_leader]
    path = f"/v1/topics/{topic}/keys/{seg(key)}/events"
    status, doc = raw(port_of(urls[1]), "GET", path, headers={"chronik-forwarded": "1"})
    assert (status, doc["error"], doc["leader"]) == (421, "not_leader", remote_leader), doc
    status, doc = raw(port_of(urls[1]), "GET", path)
    assert status == 200 and len(doc["events"]) == 3

    # A leader that serves no HTTP listener: the console cannot forward (503 naming it),
    # the event store API names it (421).
    cluster.stop(3)
    del cluster.broker(3).config["http.listen"]
    cluster.start(3)
    assert "http_api" not in cluster.get_json("/brokers/ids/3")
    solo = "fwd-solo"
    admin = cluster.admin(1)
    solo_topic = NewTopic(solo, num_partitions=2, replica_assignment=[[3], [1]],
                          config=VERSIONED)
    admin.create_topics([solo_topic])[solo].result(30)
    cluster.wait_topic(solo, 2)
    key = next(f"k{n}" for n in range(100) if partition_for_key(f"k{n}".encode(), 2) == 0)
    status, doc = api_call(c, "GET", f"aggregates/{solo}/{key}")
    assert (status, doc["error"], doc["leader"]) == (503, "leader_unreachable", 3), doc
    assert "broker 3 serves no HTTP listener" in doc["message"]
    status, doc = raw(port_of(urls[1]), "POST", f"/v1/topics/{solo}/keys/{key}/events",
                      {"events": [{"value": "x"}]})
    assert (status, doc["error"], doc["leader"]) == (421, "not_leader", 3), doc
    assert "serves no HTTP listener" in doc["message"]
    # The other partition, led by broker 1, is served as ever.
    other = next(f"k{n}" for n in range(100) if partition_for_key(f"k{n}".encode(), 2) == 1)
    status, doc = api_call(c, "POST", f"aggregates/{solo}/{other}",
                           {"expected_version": 0, "events": [{"value": "here"}]})
    assert status == 201, doc


# -- a secured cluster ---------------------------------------------------------------------


def test_aggregates_of_every_leader_as_the_logged_in_user(zookeeper: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "secured", zookeeper.connect, 3)
    sasl: dict[int, int] = {}
    for i, broker in cluster.brokers.items():
        sasl[i] = free_port()
        broker.config.update({
            # Brokers talk over PLAINTEXT (ANONYMOUS, a super user); users over SASL.
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{sasl[i]}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "chronik",
            "super.users": "User:ANONYMOUS",
            "connection.failed.authentication.delay.ms": "10",
            "http.listen": "127.0.0.1:0",
        })
    try:
        cluster.start()
        admin = cluster.admin(1)
        upserts = [UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
            for user, password in PASSWORDS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
        topic = "fwd-secured"
        create_replicated_topic(cluster, topic, PARTITIONS, rf=2, **VERSIONED)
        grants = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                             "User:alice", "*", op, AclPermissionType.ALLOW)
                  for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)]
        grants.append(AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                 "User:bob", "*", AclOperation.DESCRIBE,
                                 AclPermissionType.ALLOW))
        for future in admin.create_acls(grants, request_timeout=15).values():
            future.result()
        urls = http_urls(cluster)
        keys = keys_led_by_each(cluster, topic)

        c = ConsoleClient(port_of(urls[1]))
        status, doc, _ = c.request("GET", f"/console/api/aggregates/{topic}/k")
        assert (status, doc["error"]) == (401, "unauthorized")
        # The ACLs reach every broker through ZooKeeper within about a second.
        wait_until(lambda: c.login("alice", PASSWORDS["alice"])[0] == 200, "alice logs in", 30)
        read_and_append_everywhere(c, cluster, topic, keys)

        # bob may DESCRIBE but not READ: refused before anything is forwarded.
        b = ConsoleClient(port_of(urls[1]))
        assert b.login("bob", PASSWORDS["bob"])[0] == 200
        for key in keys.values():
            status, doc, _ = b.request("GET", f"/console/api/aggregates/{topic}/{seg(key)}")
            assert status == 403, doc

        # The event store API through broker 1, with alice's Basic credentials.
        store = EventStore(cluster.broker(1).bootstrap, urls[1],
                           auth=("alice", PASSWORDS["alice"]))
        try:
            for key in keys.values():
                assert [e.version for e in store.read(topic, key)] == [0, 1]
        finally:
            store.close()
        for client in (c, b):
            for data in client.seen:
                assert not [p for p in PASSWORDS.values() if p.encode() in data]
    finally:
        cluster.close()
    for broker in cluster.brokers.values():
        log = broker.log_text()
        assert not [p for p in PASSWORDS.values() if p in log], "a password reached a log"
