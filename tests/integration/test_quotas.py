"""Client quotas against one broker process: AlterClientQuotas and DescribeClientQuotas
(Kafka's validation and entity matching), a confluent-kafka producer and consumer held
near their byte rates and told so (librdkafka's throttle statistics) while another client
id is not, the quotas kept across a restart, and a user without ALTER_CONFIGS or
DESCRIBE_CONFIGS on the cluster refused (the CLI over SASL).

The broker runs with quota.window.num=2: Kafka's default of 11 lets a new client send ten
windows' worth at once, more than a few seconds of measuring could tell from the rate;
the unit tests check the default window's arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from conftest import BrokerProcess, free_port

from .helpers import RawClient, code, create_topic, nested, req, topic_name

ROOT = Path(__file__).resolve().parents[2]
ALICE, ALICE_PASSWORD = "alice", "alice-Quota-42"
QUOTA = 100 * 1024
INVALID_REQUEST = 42
CLUSTER_AUTHORIZATION_FAILED = 31


class Broker:
    def __init__(self, process: BrokerProcess, sasl_port: int) -> None:
        self.process = process
        self.bootstrap = process.bootstrap
        self.sasl = f"127.0.0.1:{sasl_port}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    data = tmp_path_factory.mktemp("quotas") / "data"
    done = subprocess.run(
        [sys.executable, "-m", "chronik", "users", "add", ALICE, "--password-stdin",
         "--data-dir", str(data)],
        input=ALICE_PASSWORD + "\n", capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    process = BrokerProcess(data)
    sasl_port = free_port()
    process.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{process.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "authorizer.class.name": "chronik",
            # The plaintext clients of these tests may do anything; alice nothing.
            "super.users": "User:ANONYMOUS",
            "quota.window.num": "2",
        }
    )
    process.start()
    try:
        yield Broker(process, sasl_port)
    finally:
        process.kill()


def entity(version: int, user: str | None = "", client: str | None = "") -> tuple[Any, ...]:
    """"" leaves the part out, None is the default."""
    parts = []
    if user != "":
        parts.append(nested(49, version, "EntityData", entity_type="user", entity_name=user))
    if client != "":
        parts.append(
            nested(49, version, "EntityData", entity_type="client-id", entity_name=client)
        )
    return tuple(parts)


def alter(
    bootstrap: str,
    changes: list[tuple[tuple[Any, ...], dict[str, float | None]]],
    version: int = 1,
    validate_only: bool = False,
) -> list[tuple[int, str | None]]:
    entries = tuple(
        nested(
            49,
            version,
            "EntryData",
            entity=parts,
            ops=tuple(
                nested(49, version, "OpData", key=k, value=v or 0.0, remove=v is None)
                for k, v in ops.items()
            ),
        )
        for parts, ops in changes
    )
    with RawClient(bootstrap) as raw:
        response = raw.request(req(49, version, entries=entries, validate_only=validate_only))
    return [(code(e.error_code), e.error_message) for e in response.entries]


def describe(
    bootstrap: str, components: list[tuple[str, int, str | None]], strict: bool, version: int = 1
) -> Any:
    with RawClient(bootstrap) as raw:
        return raw.request(
            req(
                48,
                version,
                components=tuple(
                    nested(48, version, "ComponentData", entity_type=t, match_type=m, match=n)
                    for t, m, n in components
                ),
                strict=strict,
            )
        )


def described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert code(response.error_code) == 0, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_alter_and_describe_with_kafkas_matching(broker: Broker) -> None:
    b = broker.bootstrap
    assert alter(
        b,
        [
            (entity(1, user="carol"), {"producer_byte_rate": 1000, "request_percentage": 12.5}),
            (entity(1, user="carol", client="etl"), {"consumer_byte_rate": 2000}),
            (entity(1, user=None), {"producer_byte_rate": 3000}),
            (entity(1, client=None), {"consumer_byte_rate": 4000}),
        ],
    ) == [(0, None)] * 4
    # Version 0 too.
    assert alter(b, [(entity(0, client="etl"), {"producer_byte_rate": 5000})]) == [(0, None)]
    carol, default_user = (("user", "carol"),), (("user", None),)
    found = described(describe(b, [("user", 0, "carol")], strict=True))
    assert found == {carol: {"producer_byte_rate": 1000.0, "request_percentage": 12.5}}
    found = described(describe(b, [("user", 0, "carol")], strict=False, version=0))
    assert set(found) == {carol, (("user", "carol"), ("client-id", "etl"))}
    assert set(described(describe(b, [("user", 1, None)], strict=True))) == {default_user}
    assert set(described(describe(b, [("user", 2, None)], strict=True))) == {carol, default_user}
    assert set(described(describe(b, [("client-id", 2, None)], strict=True))) == {
        (("client-id", "etl"),),
        (("client-id", None),),
    }
    assert len(described(describe(b, [], strict=False))) >= 5
    # Removing a key; removing the last one removes the entity.
    assert alter(b, [(entity(1, user="carol"), {"request_percentage": None})]) == [(0, None)]
    assert described(describe(b, [("user", 0, "carol")], strict=True)) == {
        carol: {"producer_byte_rate": 1000.0}
    }
    assert alter(b, [(entity(1, user="carol"), {"producer_byte_rate": None})]) == [(0, None)]
    assert described(describe(b, [("user", 0, "carol")], strict=True)) == {}
    # The defaults would hold every later test's clients (User:ANONYMOUS) to them.
    assert alter(
        b,
        [
            (entity(1, user=None), {"producer_byte_rate": None}),
            (entity(1, client=None), {"consumer_byte_rate": None}),
        ],
    ) == [(0, None)] * 2
    assert set(described(describe(b, [("user", 1, None)], strict=False))) == set()


def test_kafkas_validation(broker: Broker) -> None:
    b = broker.bootstrap
    results = alter(
        b,
        [
            (entity(1, user="dave"), {"producer_byte_rate": 10, "nope": 1}),
            (entity(1, user="dave"), {"consumer_byte_rate": -5}),
            (entity(1, user="dave"), {"producer_byte_rate": 1.5}),
            (entity(1, user=""), {}),
            (entity(1, user="erin"), {"consumer_byte_rate": 7}),
        ],
    )
    assert results[0] == (INVALID_REQUEST, "Invalid configuration key nope")
    assert results[1] == (INVALID_REQUEST, "Quota consumer_byte_rate must be greater than 0")
    assert results[2] == (
        INVALID_REQUEST, "Configuration producer_byte_rate must be a Long value"
    )
    assert results[3] == (INVALID_REQUEST, "Invalid empty client quota entity")
    assert results[4] == (0, None)
    # Nothing of a refused entry is stored; validate_only stores nothing.
    assert described(describe(b, [("user", 0, "dave")], strict=True)) == {}
    assert alter(b, [(entity(1, user="frank"), {"producer_byte_rate": 9})],
                 validate_only=True) == [(0, None)]
    assert described(describe(b, [("user", 0, "frank")], strict=True)) == {}
    bad = describe(b, [("user", 0, "a"), ("user", 0, "b")], strict=True)
    assert code(bad.error_code) == INVALID_REQUEST and bad.entries is None


def _throttle_stats(stats: dict[str, int]) -> Any:
    def on_stats(text: str) -> None:
        for broker_stats in json.loads(text)["brokers"].values():
            stats["throttle"] = max(stats["throttle"], broker_stats["throttle"]["max"])

    return on_stats


def produce_flat_out(
    bootstrap: str, topic: str, client_id: str, seconds: float
) -> tuple[float, int]:
    """Bytes per second acknowledged while producing as fast as the client may, and the
    largest throttle time librdkafka reported."""
    stats = {"throttle": 0}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "statistics.interval.ms": 200,
            "stats_cb": _throttle_stats(stats),
        }
    )
    acked = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += len(msg.value())

    value = b"q" * 1000
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    elapsed = time.monotonic() - start
    done = acked[0]
    producer.purge()
    producer.flush(1)
    producer.poll(0.5)
    return done / elapsed, stats["throttle"]


def test_a_producer_is_held_near_its_quota(broker: Broker) -> None:
    topic = topic_name("quota-p")
    create_topic(broker.bootstrap, topic)
    assert alter(broker.bootstrap, [(entity(1, client="slow-producer"),
                                     {"producer_byte_rate": QUOTA})]) == [(0, None)]
    rate, throttle = produce_flat_out(broker.bootstrap, topic, "slow-producer", 3.0)
    print(f"producer with a quota of {QUOTA} B/s: {rate:.0f} B/s, throttle up to {throttle} ms")
    assert 0.3 * QUOTA < rate < 2 * QUOTA
    assert throttle > 0
    free, free_throttle = produce_flat_out(broker.bootstrap, topic, "free-producer", 1.5)
    print(f"producer without a quota: {free:.0f} B/s")
    assert free > 5 * QUOTA
    assert free_throttle == 0


def consume_flat_out(
    bootstrap: str, topic: str, client_id: str, seconds: float
) -> tuple[float, int]:
    stats = {"throttle": 0}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"g-{client_id}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "statistics.interval.ms": 200,
            "stats_cb": _throttle_stats(stats),
        }
    )
    consumer.subscribe([topic])
    got, start = 0, None
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                start = start or time.monotonic()
                got += len(msg.value())
            if start is not None and time.monotonic() - start >= seconds:
                break
        assert start is not None, "nothing consumed"
        elapsed = time.monotonic() - start
        consumer.poll(0.3)  # a last statistics report
    finally:
        consumer.close()
    return got / elapsed, stats["throttle"]


def test_a_consumer_is_held_near_its_quota(broker: Broker) -> None:
    topic = topic_name("quota-c")
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "batch.size": 16384})
    for _ in range(2000):
        producer.produce(topic, b"c" * 1000)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert alter(broker.bootstrap, [(entity(1, client="slow-consumer"),
                                     {"consumer_byte_rate": QUOTA})]) == [(0, None)]
    rate, throttle = consume_flat_out(broker.bootstrap, topic, "slow-consumer", 3.0)
    print(f"consumer with a quota of {QUOTA} B/s: {rate:.0f} B/s, throttle up to {throttle} ms")
    assert 0.3 * QUOTA < rate < 2 * QUOTA
    assert throttle > 0
    free, free_throttle = consume_flat_out(broker.bootstrap, topic, "free-consumer", 1.0)
    print(f"consumer without a quota: {free:.0f} B/s")
    assert free > 5 * QUOTA
    assert free_throttle == 0


def _cli(broker: Broker, *args: str, config: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "chronik", "quotas", *args]
    if config is not None:
        cmd += ["--bootstrap-server", broker.sasl, "--command-config", str(config)]
    else:
        cmd += ["--bootstrap-server", broker.bootstrap]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_cli_and_a_user_without_acls(broker: Broker, tmp_path: Path) -> None:
    done = _cli(broker, "alter", "--entity-type", "users", "--entity-name", "gina",
                "--entity-type", "clients", "--entity-default",
                "--add-config", "producer_byte_rate=2048,consumer_byte_rate=4096")
    assert done.returncode == 0, done.stderr
    done = _cli(broker, "describe", "--entity-type", "users", "--entity-name", "gina",
                "--entity-type", "clients")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "Quota configs for user-principal 'gina', the default client-id are "
        "consumer_byte_rate=4096.0,producer_byte_rate=2048.0"
    )
    done = _cli(broker, "alter", "--user", "gina", "--add-config", "bogus=1")
    assert done.returncode != 0
    assert "INVALID_REQUEST: Invalid configuration key bogus" in done.stderr
    config = tmp_path / "alice.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ALICE}" password="{ALICE_PASSWORD}";\n'
    )
    done = _cli(broker, "alter", "--user", ALICE, "--add-config", "producer_byte_rate=1",
                config=config)
    assert done.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in done.stderr
    done = _cli(broker, "describe", config=config)
    assert done.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in done.stderr
    # Nothing of alice's was stored.
    assert described(describe(broker.bootstrap, [("user", 0, ALICE)], strict=False)) == {}


def test_quotas_survive_a_restart(broker: Broker) -> None:
    assert alter(broker.bootstrap, [(entity(1, user="henry", client="x"),
                                     {"producer_byte_rate": 777})]) == [(0, None)]
    before = described(describe(broker.bootstrap, [], strict=False))
    assert broker.process.terminate() == 0
    broker.process.start()
    after = described(describe(broker.bootstrap, [], strict=False))
    assert after == before
    assert after[(("user", "henry"), ("client-id", "x"))] == {"producer_byte_rate": 777.0}
