"""The schema registry in a three-broker cluster: every broker answers reads from its copy
of _schemas, writes sent to any broker reach the one primary (the leader of _schemas-0),
and a kill -9 of the primary loses no registered schema and never hands out an id twice."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from .registry_support import avro_record, call
from .replication_support import REPLICATION_CONFIG

CONFIG = {**REPLICATION_CONFIG, "schema.registry.listen": "127.0.0.1:0"}


def registry_urls(cluster) -> dict[int, str]:
    """Each running broker's registry URL, as it registered it in ZooKeeper."""
    return {
        i: cluster.get_json(f"/brokers/ids/{i}")["schema_registry"]
        for i in cluster.running()
        if cluster.exists(f"/brokers/ids/{i}")
    }


def schema(n: int) -> str:
    # Each a new record name, so every registration is a new schema (and FULL-free).
    return avro_record(f"Event{n}", ("n", "int"))


def register(url: str, subject: str, text: str, timeout: float = 60) -> int:
    """Register, retrying while the registry is between primaries (a 5xx)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return SchemaRegistryClient({"url": url}).register_schema(subject, Schema(text, "AVRO"))
        except SchemaRegistryError as exc:
            if exc.http_status_code < 500 or time.monotonic() > deadline:
                raise
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def read_everywhere(urls: dict[int, str], ids: dict[str, int], timeout: float = 15) -> None:
    """Every broker answers every subject's latest id. A broker other than the one a write
    went through learns of it with its next replica fetch: within a second or so."""
    deadline = time.monotonic() + timeout
    for i, url in urls.items():
        status, subjects, _ = call(f"{url}/subjects")
        while status != 200 or not set(ids) <= set(subjects):
            assert time.monotonic() < deadline, f"broker {i} lacks {set(ids) - set(subjects)}"
            time.sleep(0.2)
            status, subjects, _ = call(f"{url}/subjects")
        for subject, schema_id in ids.items():
            status, body, _ = call(f"{url}/subjects/{subject}/versions/latest")
            assert (status, body.get("id")) == (200, schema_id), (i, subject, body)
            assert json.loads(body["schema"])["name"].startswith("Event")


def primary(cluster) -> int:
    return int(cluster.partition_state("_schemas", 0)["leader"])


@pytest.mark.slow
def test_writes_to_any_broker_one_primary_and_a_killed_primary_loses_nothing(cluster_factory):
    cluster = cluster_factory(config=CONFIG)
    urls = registry_urls(cluster)
    assert sorted(urls) == [1, 2, 3]
    ids: dict[str, int] = {}
    # The first write creates _schemas, wherever it is sent.
    ids["s0"] = register(urls[1], "s0", schema(0))
    lead = primary(cluster)
    followers = [i for i in urls if i != lead]
    # Writes sent to followers are forwarded to the primary.
    for n, via in enumerate(followers * 2, start=1):
        ids[f"s{n}"] = register(urls[via], f"s{n}", schema(n))
    assert sorted(ids.values()) == list(range(1, len(ids) + 1))
    # Every broker reads every schema from its own copy.
    read_everywhere(urls, ids)
    # The same schema sent to two brokers at once keeps one id.
    again = register(urls[followers[0]], "s1-copy", schema(1))
    assert again == ids["s1"]

    cluster.kill(lead)
    survivors = {i: u for i, u in urls.items() if i != lead}
    before = max(ids.values())
    for n, via in enumerate(list(survivors) * 2, start=100):
        ids[f"s{n}"] = register(survivors[via], f"s{n}", schema(n))
    assert primary(cluster) in survivors
    new_ids = [ids[f"s{n}"] for n in range(100, 104)]
    # Nothing handed out twice: the new primary continued after the old one's ids.
    assert new_ids == list(range(before + 1, before + 5))
    read_everywhere(survivors, ids)

    # The killed broker comes back, reads its copy and agrees.
    cluster.start(lead)
    read_everywhere({lead: registry_urls(cluster)[lead]}, ids, timeout=60)


@pytest.mark.slow
def test_validation_on_every_leader_of_a_cluster(cluster_factory):
    """An opted-in topic's partitions are led by different brokers; each checks against its
    own copy of _schemas, so a schema registered through one broker is taken by all."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from .replication_support import create_replicated_topic

    cluster = cluster_factory(config=CONFIG)
    urls = registry_urls(cluster)
    topic = "validated"
    create_replicated_topic(cluster, topic, 3)
    admin = cluster.admin(1)
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(
        "topic", topic, set_config={"confluent.value.schema.validation": "true"}
    )
    admin.alter_configs([resource])[resource].result(30)
    assert len(set(cluster.leaders(topic, via=1).values())) > 1
    serializer = AvroSerializer(SchemaRegistryClient({"url": urls[2]}), schema(7))
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    results: list[object] = []

    def report(err, msg):
        results.append(err if err is not None else msg.partition())

    for n in range(30):
        producer.produce(
            topic, value=serializer({"n": n}, ctx), partition=n % 3, on_delivery=report
        )
    assert producer.flush(60) == 0
    # Alone in its batch: one bad record refuses the whole batch it is in.
    producer.produce(topic, value=b"junk", partition=0, on_delivery=report)
    assert producer.flush(60) == 0
    delivered = [r for r in results if isinstance(r, int)]
    refused = [r for r in results if not isinstance(r, int)]
    assert sorted(set(delivered)) == [0, 1, 2] and len(delivered) == 30
    assert len(refused) == 1 and refused[0].code() == KafkaError.INVALID_RECORD
