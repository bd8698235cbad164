"""Re-authentication (KIP-368, `connections.max.reauth.ms`): one broker with a 1.5 s
session lifetime, except PLAIN on its SASL_SSL listener (the per-listener key set to 0).
confluent-kafka's producer and consumer, and Java's producer, re-authenticate across
several lifetimes and lose nothing; a client by hand sees the lifetime, keeps its
connection by re-authenticating, loses it by not doing so, and cannot change users,
mechanisms, or keep a user that was deleted."""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from conftest import BrokerProcess, free_port

from . import test_security
from .helpers import RawClient, code, create_topic, req, topic_name
from .java_support import JAVA_TIMEOUT, compile_java, needs_java
from .test_security import (
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    JAVA_CLIENT,
    SecureBroker,
)

LIFETIME_MS = 1500
SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34


class MeteredBroker(BrokerProcess):
    """A broker process that also serves /metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics_port = free_port()

    def start(self, wait: bool = True) -> BrokerProcess:
        cmd = [sys.executable, "-m", "chronik", "serve", "--data-dir", str(self.data_dir),
               "--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self


@pytest.fixture(scope="module")
def reauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(test_security, "BrokerProcess", MeteredBroker)
        sb = test_security.start_secure_broker(
            tmp_path_factory.mktemp("reauth"),
            **{
                "connections.max.reauth.ms": str(LIFETIME_MS),
                "listener.name.sasl_ssl.plain.connections.max.reauth.ms": "0",
            },
        )
    try:
        yield sb
    finally:
        sb.broker.kill()
        log = sb.log()
        assert not [s for s in test_security.SECRETS if s in log], "a password reached the log"
        assert "Traceback" not in log


def metrics(sb: SecureBroker) -> dict[str, float]:
    port = sb.broker.metrics_port  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def reauthentications(sb: SecureBroker, mechanism: str, result: str) -> float:
    key = f'chronik_sasl_reauthentications_total{{mechanism="{mechanism}",result="{result}"}}'
    return metrics(sb).get(key, 0.0)


def expired_closed(sb: SecureBroker) -> float:
    return metrics(sb)["chronik_sasl_expired_connections_closed_total"]


def raw_client(sb: SecureBroker, listener: str) -> RawClient:
    raw = RawClient(sb.bootstrap(listener))
    if listener == "SASL_SSL":
        context = ssl.create_default_context(cafile=str(sb.pki.ca_file))
        raw.sock = context.wrap_socket(raw.sock, server_hostname="localhost")
    return raw


def plain(raw: RawClient, user: str, password: str, mechanism: str = "PLAIN") -> Any:
    """SaslHandshake v1 and one SaslAuthenticate v1 with PLAIN's token: the answer."""
    handshake = raw.request(req(17, 1, mechanism=mechanism))
    assert code(handshake.error_code) == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return raw.request(req(36, 1, auth_bytes=token))


def lifetime_ms(answer: Any) -> int:
    return round(answer.session_lifetime.total_seconds() * 1000)


def metadata_ok(raw: RawClient) -> bool:
    return len(raw.request(req(3, 1, topics=None)).brokers) == 1


def assert_closed(raw: RawClient) -> None:
    with pytest.raises((ConnectionError, OSError)):
        raw.request(req(3, 1, topics=None))
        raw.request(req(3, 1, topics=None))


def test_confluent_clients_keep_working_across_session_lifetimes(reauth: SecureBroker) -> None:
    """librdkafka (2.2+) re-authenticates before each 1.5 s lifetime ends: a producer and
    a consumer over SASL_SSL with SCRAM-SHA-512, busy for 5 s, lose nothing, and the
    broker closes none of their connections."""
    topic = topic_name("reauth")
    create_topic(reauth.bootstrap("PLAINTEXT"), topic)
    before_closed = expired_closed(reauth)
    before = reauthentications(reauth, "SCRAM-SHA-512", "success")
    conf = reauth.conf("SASL_SSL", "SCRAM-SHA-512")
    errors: list[str] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer(
        {**conf, "linger.ms": 5, "error_cb": lambda e: errors.append(str(e)),
         "on_delivery": delivered}
    )
    consumer = Consumer(
        {**conf, "group.id": topic_name("reauth-g"), "auto.offset.reset": "earliest",
         "error_cb": lambda e: errors.append(str(e))}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())

    reader = threading.Thread(target=consume)
    reader.start()
    sent: list[bytes] = []
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            value = b"v-%d" % len(sent)
            producer.produce(topic, value)
            sent.append(value)
            producer.poll(0.01)
        assert producer.flush(20) == 0
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        reader.join()
        consumer.close()
    assert not failed, failed[:5]
    assert got == sent
    assert not errors, errors
    # At least a producer's and a consumer's connection, a few lifetimes each.
    assert reauthentications(reauth, "SCRAM-SHA-512", "success") - before >= 4
    assert reauthentications(reauth, "SCRAM-SHA-512", "failure") == 0
    assert expired_closed(reauth) == before_closed


@needs_java
def test_java_producer_reauthenticates(reauth: SecureBroker, tmp_path: Path) -> None:
    """Java kafka-clients' producer (SASL_SSL, SCRAM-SHA-512) fed one record every
    100 ms, at least 45 and on until it has re-authenticated twice: every record lands,
    through re-authentications, none closed."""
    classpath = compile_java(tmp_path / "classes", JAVA_CLIENT)
    config = tmp_path / "sasl.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ALICE}" password="{ALICE_PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={reauth.pki.ca_file}\n"
    )
    topic = topic_name("reauth-java")
    create_topic(reauth.bootstrap("PLAINTEXT"), topic)
    before_closed = expired_closed(reauth)
    before = reauthentications(reauth, "SCRAM-SHA-512", "success")
    java = subprocess.Popen(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "ChronikClient",
         "produce", reauth.bootstrap("SASL_SSL"), topic, "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CHRONIK_CLIENT_CONFIG": str(config)},
    )
    assert java.stdin is not None
    # Fed for as long as two lifetimes of its session take: on a loaded machine the JVM
    # may start after the first 45 records are all waiting, and send them at once.
    sent = 0
    deadline = time.monotonic() + 60
    while sent < 45 or (
        reauthentications(reauth, "SCRAM-SHA-512", "success") - before < 2
        and time.monotonic() < deadline
    ):
        java.stdin.write(f"{1_700_000_000_000 + sent}\taw==\t{_b64(b'java-%d' % sent)}\t\n")
        java.stdin.flush()
        sent += 1
        time.sleep(0.1)
    out, err = java.communicate(timeout=JAVA_TIMEOUT)
    assert java.returncode == 0, err[-4000:]
    offsets = [int(f[2]) for f in (line.split("\t") for line in out.splitlines()) if f[0] == "sent"]
    assert offsets == list(range(sent))
    assert reauthentications(reauth, "SCRAM-SHA-512", "success") - before >= 2
    assert expired_closed(reauth) == before_closed


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_client_by_hand_sees_the_lifetime_and_must_reauthenticate(
    reauth: SecureBroker,
) -> None:
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        answer = plain(raw, ALICE, ALICE_PASSWORD)
        assert code(answer.error_code) == 0
        assert lifetime_ms(answer) == LIFETIME_MS
        assert metadata_ok(raw)
        time.sleep(1.0)
        # Re-authenticating starts a new lifetime, on the same connection.
        again = plain(raw, ALICE, ALICE_PASSWORD)
        assert code(again.error_code) == 0
        assert lifetime_ms(again) == LIFETIME_MS
        time.sleep(1.0)  # past the first lifetime, within the second
        assert metadata_ok(raw)
        _, port = raw.sock.getsockname()
        time.sleep(0.7)
        closed_before = expired_closed(reauth)
        assert_closed(raw)
    assert expired_closed(reauth) == closed_before + 1
    assert (
        f"closing connection from 127.0.0.1:{port}: SASL session of User:{ALICE} expired"
        in reauth.log()
    )


def test_after_expiry_even_api_versions_closes_the_connection(reauth: SecureBroker) -> None:
    """As Kafka's SocketServer: only a SaslHandshake is served once the session expired,
    and a re-authentication then still works."""
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        assert code(plain(raw, ALICE, ALICE_PASSWORD).error_code) == 0
        time.sleep(1.6)
        with pytest.raises((ConnectionError, OSError)):
            raw.request(req(18, 3, client_software_name="t", client_software_version="1"))
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        assert code(plain(raw, ALICE, ALICE_PASSWORD).error_code) == 0
        time.sleep(1.6)
        assert code(plain(raw, ALICE, ALICE_PASSWORD).error_code) == 0
        assert metadata_ok(raw)


def test_reauthenticating_as_another_user_is_refused(reauth: SecureBroker) -> None:
    before = reauthentications(reauth, "PLAIN", "failure")
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        assert code(plain(raw, ALICE, ALICE_PASSWORD).error_code) == 0
        answer = plain(raw, ADMIN, ADMIN_PASSWORD)
        assert code(answer.error_code) == SASL_AUTHENTICATION_FAILED
        assert answer.error_message == (
            f"Cannot change principals during re-authentication from User.{ALICE}: User.{ADMIN}"
        )
        assert_closed(raw)
    assert reauthentications(reauth, "PLAIN", "failure") == before + 1
    assert f"failed re-authentication of User:{ALICE} from 127.0.0.1" in reauth.log()


def test_reauthenticating_with_another_mechanism_is_refused(reauth: SecureBroker) -> None:
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        assert code(plain(raw, ALICE, ALICE_PASSWORD).error_code) == 0
        # The handshake is answered; the exchange fails, as in Kafka.
        answer = plain(raw, ALICE, ALICE_PASSWORD, mechanism="SCRAM-SHA-256")
        assert code(answer.error_code) == SASL_AUTHENTICATION_FAILED
        assert "not supported for re-authentication of mechanism 'PLAIN'" in answer.error_message
        assert_closed(raw)


def test_a_deleted_user_fails_its_next_reauthentication(reauth: SecureBroker) -> None:
    admin = AdminClient(reauth.conf("SASL_SSL", "SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD))
    user, password = "carol", "carol-Pa55-word"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())]
    ).values():
        future.result(timeout=20)
    with raw_client(reauth, "SASL_PLAINTEXT") as raw:
        assert code(plain(raw, user, password).error_code) == 0
        assert metadata_ok(raw)
        for future in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
        ).values():
            future.result(timeout=20)
        # Still served until the session ends; the re-authentication fails.
        assert metadata_ok(raw)
        time.sleep(1.0)
        answer = plain(raw, user, password)
        assert code(answer.error_code) == SASL_AUTHENTICATION_FAILED
        assert "during re-authentication" in answer.error_message
        assert_closed(raw)


def test_a_listener_and_mechanism_with_no_lifetime(reauth: SecureBroker) -> None:
    """listener.name.sasl_ssl.plain.connections.max.reauth.ms=0: session_lifetime_ms 0,
    a SaslHandshake after authentication is ILLEGAL_SASL_STATE, and the connection
    outlives the others' lifetime."""
    with raw_client(reauth, "SASL_SSL") as raw:
        answer = plain(raw, ALICE, ALICE_PASSWORD)
        assert code(answer.error_code) == 0
        assert lifetime_ms(answer) == 0
        handshake = raw.request(req(17, 1, mechanism="PLAIN"))
        assert code(handshake.error_code) == ILLEGAL_SASL_STATE
        time.sleep(1.6)
        assert metadata_ok(raw)


def test_a_bad_setting_is_one_line(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chronik", "serve", "--data-dir", str(tmp_path / "d"),
         "--listen", f"127.0.0.1:{free_port()}", "--set", "connections.max.reauth.ms=-5"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "chronik: error: connections.max.reauth.ms must be 0 (no re-authentication) or more, "
        "got -5"
    ]
