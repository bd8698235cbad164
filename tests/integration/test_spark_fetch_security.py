"""The Spark source's own Fetch reader over TLS and SASL: with Spark's Kafka-source
options in Java's names (kafka.sasl.jaas.config, kafka.ssl.truststore.location) or
librdkafka's, it connects, authenticates and reads the same rows as librdkafka does,
without handing over to librdkafka; wrong credentials are an error, not a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

pytest.importorskip("numba")
pytest.importorskip("pyspark")

from chronik.spark import arrow_read, fetch_read  # noqa: E402
from chronik.spark.fetch_auth import AuthenticationError  # noqa: E402
from chronik.spark.options import parse_read_options  # noqa: E402

from .helpers import create_topic, topic_name  # noqa: E402
from .test_security import (  # noqa: E402
    ALICE,
    ALICE_PASSWORD,
    SecureBroker,
    produce_consume,
    start_secure_broker,
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    # No failed-authentication delay here: test_security.py shows it.
    sb = start_secure_broker(
        tmp_path_factory.mktemp("spark-secure"),
        **{"connection.failed.authentication.delay.ms": "0"},
    )
    try:
        yield sb
    finally:
        sb.broker.kill()


def _no_fallback(*_args, **_kwargs):
    raise AssertionError("the Fetch reader serves TLS and SASL itself")


def _options(sb: SecureBroker, listener: str, style: str, password: str) -> dict[str, str]:
    options = {
        "kafka.bootstrap.servers": sb.bootstrap(listener),
        "kafka.security.protocol": listener,
        "subscribe": "x",
    }
    if style == "java":
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(sb.pki.ca_file)
        if "SASL" in listener:
            options["kafka.sasl.mechanism"] = "SCRAM-SHA-512"
            options["kafka.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ALICE}" password="{password}";'
            )
    else:
        options["kafka.ssl.ca.location"] = str(sb.pki.ca_file)
        if "SASL" in listener:
            options["kafka.sasl.mechanism"] = "PLAIN" if listener == "SASL_PLAINTEXT" else (
                "SCRAM-SHA-256")
            options["kafka.sasl.username"] = ALICE
            options["kafka.sasl.password"] = password
    return options


def _filled(sb: SecureBroker) -> tuple[str, list[bytes]]:
    topic = topic_name("spark-sec")
    create_topic(sb.bootstrap("PLAINTEXT"), topic)
    values = [b"s-%d" % i for i in range(300)]
    assert produce_consume(sb.conf("PLAINTEXT"), topic, values[:1]) == values[:1]
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": sb.bootstrap("PLAINTEXT"), "linger.ms": 5})
    for v in values[1:]:
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    return topic, values


@pytest.mark.parametrize(
    ("listener", "style"),
    [("SASL_SSL", "java"), ("SSL", "java"), ("SASL_SSL", "librdkafka"),
     ("SASL_PLAINTEXT", "librdkafka")],
)
def test_fetch_reader_over_tls_and_sasl(secure: SecureBroker, listener: str, style: str) -> None:
    topic, values = _filled(secure)
    conf = parse_read_options(_options(secure, listener, style, ALICE_PASSWORD), False)
    consumer = conf.consumer_config()
    assert fetch_read.usable(consumer)
    fast = [row for b in fetch_read.read_range(
        consumer, topic, 0, 0, len(values), include_headers=False, fail_on_data_loss=True,
        poll_timeout_s=20, fallback=_no_fallback,
    ) for row in b.to_pylist()]
    assert [r["value"] for r in fast] == values
    slow = [row for b in arrow_read.read_range(
        consumer, topic, 0, 0, len(values), include_headers=False, poll_timeout_s=20,
    ) for row in b.to_pylist()]
    assert fast == slow


def test_fetch_reader_with_a_wrong_password_fails(secure: SecureBroker) -> None:
    topic, _ = _filled(secure)
    consumer = parse_read_options(
        _options(secure, "SASL_SSL", "java", "wrong-Password-7"), False
    ).consumer_config()
    started = time.monotonic()
    # The leader lookup (librdkafka) or the Fetch connection's own SASL exchange refuses.
    with pytest.raises((AuthenticationError, KafkaException, TimeoutError)):
        list(fetch_read.read_range(
            consumer, topic, 0, 0, 10, include_headers=False, fail_on_data_loss=True,
            poll_timeout_s=3, fallback=_no_fallback,
        ))
    assert time.monotonic() - started < 30


def test_settings_it_cannot_serve_go_to_librdkafka() -> None:
    assert not fetch_read.usable({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"})
    assert not fetch_read.usable({"security.protocol": "SSL",
                                  "ssl.keystore.location": "/k.p12"})
    assert fetch_read.usable({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                              "ssl.ca.location": str(Path("/ca.pem"))})


def test_fetch_connection_refuses_a_wrong_password(secure: SecureBroker) -> None:
    from chronik.spark.fetch_client import FetchConnection

    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": ALICE,
        "sasl.password": "wrong-Password-7",
        "ssl.ca.location": str(secure.pki.ca_file),
    }
    port = secure.ports["SASL_SSL"]
    with pytest.raises(AuthenticationError, match="Authentication failed"):
        FetchConnection("127.0.0.1", port, "t", 10, security)
    security["sasl.password"] = ALICE_PASSWORD
    FetchConnection("127.0.0.1", port, "t", 10, security).close()
