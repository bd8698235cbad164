"""The Prometheus endpoint, scraped over HTTP and parsed."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from chronik.broker.embedded import EmbeddedBroker

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+]+|\+Inf|NaN)$")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not Prometheus text format: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def test_metrics_endpoint_reports_traffic_sizes_and_lag(tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "data", metrics_listen="127.0.0.1:0") as embedded:
        port = embedded.broker.metrics_port
        assert port
        producer = Producer({"bootstrap.servers": embedded.bootstrap, "acks": "all"})
        for _ in range(50):
            producer.produce("metered", key=b"k", value=b"v" * 100)
        assert producer.flush(15) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": embedded.bootstrap,
                "group.id": "lagging",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("metered", 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(10, 0.5) if m.error() is None]
        consumer.commit(offsets=[TopicPartition("metered", 0, 10)], asynchronous=False)
        consumer.close()

        samples = scrape(port)
        assert samples['chronik_requests_total{api="produce"}'] >= 1
        assert samples['chronik_request_duration_seconds_count{api="fetch"}'] >= 1
        assert samples['chronik_bytes_in_total{topic="metered"}'] > 50 * 100
        assert samples["chronik_bytes_out_total"] > 0
        assert samples['chronik_log_end_offset{topic="metered",partition="0"}'] == 50
        assert samples['chronik_partition_size_bytes{topic="metered",partition="0"}'] > 5000
        assert (
            samples['chronik_consumer_group_lag{group="lagging",topic="metered",partition="0"}']
            == 40
        )
        assert samples["chronik_fsync_duration_seconds_count"] >= 1


def test_unknown_path_is_404(tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "data", metrics_listen="127.0.0.1:0") as embedded:
        port = embedded.broker.metrics_port
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=5)
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        else:
            raise AssertionError("expected 404")


def test_sasl_authentications_are_counted(tmp_path) -> None:
    from confluent_kafka import KafkaError

    from chronik.security.credentials import CredentialStore
    from chronik.security.scram import make_credential

    data = tmp_path / "data"
    credential = make_credential("SCRAM-SHA-256", "pw-1")
    CredentialStore(data).upsert("ann", "SCRAM-SHA-256", credential)
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "connection.failed.authentication.delay.ms": "0",
    }
    with EmbeddedBroker(data, config=config, metrics_listen="127.0.0.1:0") as embedded:
        sasl_port = embedded.broker.security.listeners[1].port
        for mechanism, password in (("SCRAM-SHA-256", "pw-1"), ("PLAIN", "nope")):
            errors: list[KafkaError] = []
            producer = Producer({
                "bootstrap.servers": f"127.0.0.1:{sasl_port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism,
                "sasl.username": "ann",
                "sasl.password": password,
                "error_cb": errors.append,
            })
            producer.produce("sasl-metered", b"v")
            producer.flush(5 if password == "pw-1" else 2)
        samples = scrape(embedded.broker.metrics_port)
        name = "chronik_sasl_authentications_total"
        assert samples[f'{name}{{mechanism="SCRAM-SHA-256",result="success"}}'] >= 1
        assert samples[f'{name}{{mechanism="PLAIN",result="failure"}}'] >= 1


def test_schema_registry_metrics(tmp_path) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    config = {"schema.registry.listen": "127.0.0.1:0"}
    with EmbeddedBroker(tmp_path / "data", config=config, metrics_listen="127.0.0.1:0") as embedded:
        port = embedded.broker.metrics_port
        client = SchemaRegistryClient({"url": embedded.broker.registry_api.url})

        def record(name: str, *fields: str) -> Schema:
            columns = [{"name": f, "type": "int", "default": 0} for f in fields]
            return Schema(json.dumps({"type": "record", "name": name, "fields": columns}), "AVRO")

        client.register_schema("orders-value", record("Order", "a"))
        client.register_schema("orders-value", record("Order", "a", "b"))
        client.register_schema("users-value", record("User", "a"))
        client.register_schema("copies-value", record("User", "a"))  # the same schema: no new id
        client.delete_subject("users-value")
        samples = scrape(port)
        assert samples["chronik_schema_registry_subjects"] == 2
        assert samples["chronik_schema_registry_schemas"] == 3
        assert samples['chronik_schema_registry_versions{state="live"}'] == 3
        assert samples['chronik_schema_registry_versions{state="deleted"}'] == 1
        assert samples["chronik_schema_registry_primary"] == 1
        assert samples["chronik_schema_registry_forwarded_writes_total"] == 0
        assert samples["chronik_schema_registry_bad_records_total"] == 0
        # A record any client may write to _schemas that is not in the registry's format.
        producer = Producer({"bootstrap.servers": embedded.bootstrap, "acks": "all"})
        producer.produce("_schemas", key=b"not json", value=b"{}")
        producer.produce("_schemas", key=b'{"keytype": "NOPE", "magic": 0}', value=b"{}")
        assert producer.flush(15) == 0
        deadline = time.monotonic() + 10
        while scrape(port)["chronik_schema_registry_bad_records_total"] < 2:
            assert time.monotonic() < deadline, "the registry did not read the bad records"
            time.sleep(0.1)
        # The registry is unharmed by them.
        assert client.get_latest_version("orders-value").version == 2
        assert scrape(port)["chronik_schema_registry_subjects"] == 2


def test_no_registry_no_registry_metrics(tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "data", metrics_listen="127.0.0.1:0") as embedded:
        assert not any("schema_registry" in name for name in scrape(embedded.broker.metrics_port))


@pytest.mark.slow
def test_schema_registry_primary_and_forwarded_writes_in_a_cluster(zookeeper, tmp_path) -> None:
    """Two brokers of one cluster, each serving the registry: the leader of _schemas-0 says
    it is the primary, and the other counts the writes it forwarded to it."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from .cluster_support import DEFAULT_CONFIG

    chroot = f"/chronik-metrics-{time.monotonic_ns()}"
    common = {
        **DEFAULT_CONFIG,
        "zookeeper.connect": f"{zookeeper.connect}{chroot}",
        "default.replication.factor": "2",
        "offsets.topic.replication.factor": "2",
        "schema.registry.listen": "127.0.0.1:0",
    }
    brokers = {
        i: EmbeddedBroker(
            tmp_path / f"broker-{i}",
            config={**common, "broker.id": str(i)},
            metrics_listen="127.0.0.1:0",
        ).start()
        for i in (1, 2)
    }
    try:
        schema = Schema(json.dumps({"type": "record", "name": "R", "fields": []}), "AVRO")
        deadline = time.monotonic() + 60
        while True:  # the first write creates _schemas; until it has a leader, a 5xx
            try:
                SchemaRegistryClient({"url": brokers[1].broker.registry_api.url}).register_schema(
                    "first-value", schema
                )
                break
            except Exception:
                assert time.monotonic() < deadline, "the registry never took a write"
                time.sleep(0.5)
        primary = {i: scrape(b.broker.metrics_port) for i, b in brokers.items()}
        leader = [i for i, s in primary.items() if s["chronik_schema_registry_primary"] == 1]
        assert len(leader) == 1, primary
        other = 3 - leader[0]
        assert primary[other]["chronik_schema_registry_primary"] == 0
        before = primary[other]["chronik_schema_registry_forwarded_writes_total"]
        client = SchemaRegistryClient({"url": brokers[other].broker.registry_api.url})
        for n in range(3):
            client.register_schema(f"via-follower-{n}-value", schema)
        after = scrape(brokers[other].broker.metrics_port)
        assert after["chronik_schema_registry_forwarded_writes_total"] == before + 3
        on_primary = scrape(brokers[leader[0]].broker.metrics_port)
        assert on_primary["chronik_schema_registry_forwarded_writes_total"] == 0
        # Both copies agree on what was written.
        for b in brokers.values():
            deadline = time.monotonic() + 15
            while scrape(b.broker.metrics_port)["chronik_schema_registry_subjects"] < 4:
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        for b in brokers.values():
            b.close()
