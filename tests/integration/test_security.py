"""TLS and SASL listeners, driven by real clients: one broker with PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL listeners, certificates made in the test, and users made
with `chronik users add` before it starts. Wrong passwords and unknown users are
refused with the SASL error and write nothing; nothing secret reaches the log."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from conftest import BrokerProcess, free_port

from .helpers import RawClient, create_topic, req, topic_name
from .java_support import JAVA_TIMEOUT, compile_java, needs_java
from .tls_support import Pki, make_pki

ROOT = Path(__file__).resolve().parents[2]
JAVA_CLIENT = ROOT / "tests" / "compat" / "java" / "ChronikClient.java"
ADMIN, ADMIN_PASSWORD = "admin", "admin-Pa55word"
ALICE, ALICE_PASSWORD = "alice", "alice-Secret-42"
SECRETS = (ADMIN_PASSWORD, ALICE_PASSWORD, "wrong-Password-7")


def chronik(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chronik", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@dataclass
class SecureBroker:
    broker: BrokerProcess
    pki: Pki
    ports: dict[str, int]
    client_pem: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def conf(
        self,
        listener: str,
        mechanism: str = "SCRAM-SHA-512",
        user: str = ALICE,
        password: str = ALICE_PASSWORD,
    ) -> dict[str, Any]:
        """confluent-kafka settings for a client of ``listener``."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap(listener),
            "security.protocol": listener,
        }
        if "SSL" in listener:
            conf["ssl.ca.location"] = str(self.pki.ca_file)
        if "SASL" in listener:
            conf.update(
                {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
            )
        return conf

    def log(self) -> str:
        return self.broker.log_path.read_text(errors="replace")


def start_secure_broker(tmp: Path, **extra: str) -> SecureBroker:
    pki = make_pki(tmp / "pki")
    broker_pem = pki.issue("broker", "localhost", server=True)
    client_pem = pki.issue("client", "alice", unit="eng")
    data = tmp / "data"
    for user, password in ((ADMIN, ADMIN_PASSWORD), (ALICE, ALICE_PASSWORD)):
        done = chronik("users", "add", user, "--password-stdin", "--data-dir", str(data),
                       stdin=password + "\n")
        assert done.returncode == 0, done.stderr
    broker = BrokerProcess(data)
    ports = {
        "PLAINTEXT": broker.port,
        "SSL": free_port(),
        "SASL_PLAINTEXT": free_port(),
        "SASL_SSL": free_port(),
    }
    broker.config.update(
        {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_file),
            "ssl.client.auth": "requested",
            "connection.failed.authentication.delay.ms": "20",
            **extra,
        }
    )
    broker.start()
    for port in ports.values():
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    return SecureBroker(broker, pki, ports, client_pem)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    sb = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        yield sb
    finally:
        sb.broker.kill()
        log = sb.log()
        leaked = [s for s in SECRETS if s in log]
        assert not leaked, "a password reached the broker's log"
        assert "PRIVATE KEY" not in log


def produce_consume(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[bytes]:
    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(20) == 0, errors
    consumer = Consumer(
        {**conf, "group.id": topic_name("sec-g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def authentication_errors(conf: dict[str, Any], topic: str) -> list[KafkaError]:
    """The errors a producer with ``conf`` reports while it tries to write one record,
    once an authentication error is among them (the broker's failure delay grows with
    an address's recent failures, so this may take a few seconds)."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 30000})
    producer.produce(topic, b"must not land")
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    return errors


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sec-probe"})
    try:
        from confluent_kafka import TopicPartition

        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return high
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SSL", None),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SASL_SSL", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ],
)
def test_confluent_kafka_over_each_listener(secure: SecureBroker, listener, mechanism) -> None:
    topic = topic_name("sec")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    conf = secure.conf(listener, mechanism or "PLAIN")
    values = [b"%s-%d" % (listener.encode(), i) for i in range(20)]
    assert produce_consume(conf, topic, values) == values


def test_metadata_names_the_listener_the_client_came_in_on(secure: SecureBroker) -> None:
    from confluent_kafka.admin import AdminClient

    for listener in ("SSL", "SASL_SSL", "SASL_PLAINTEXT"):
        metadata = AdminClient(secure.conf(listener)).list_topics(timeout=20)
        ports = {b.port for b in metadata.brokers.values()}
        assert ports == {secure.ports[listener]}


def test_mutual_tls_with_a_client_certificate(secure: SecureBroker) -> None:
    topic = topic_name("sec-mtls")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    conf = {
        **secure.conf("SSL"),
        "ssl.certificate.location": str(secure.client_pem),
        "ssl.key.location": str(secure.client_pem),
    }
    assert produce_consume(conf, topic, [b"m1", b"m2"]) == [b"m1", b"m2"]


@pytest.mark.parametrize(
    ("user", "password", "mechanism"),
    [
        (ALICE, "wrong-Password-7", "SCRAM-SHA-512"),
        ("mallory", "wrong-Password-7", "SCRAM-SHA-256"),
        (ALICE, "wrong-Password-7", "PLAIN"),
        ("mallory", "wrong-Password-7", "PLAIN"),
    ],
)
def test_wrong_password_or_unknown_user_is_refused_and_writes_nothing(
    secure: SecureBroker, user: str, password: str, mechanism: str
) -> None:
    topic = topic_name("sec-refused")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    errors = authentication_errors(secure.conf("SASL_SSL", mechanism, user, password), topic)
    assert any("Authentication failed" in e.str() for e in errors), errors
    assert end_offset(secure.bootstrap("PLAINTEXT"), topic) == 0
    assert "failed authentication from 127.0.0.1" in secure.log()


def test_requests_before_authentication_close_the_connection(secure: SecureBroker) -> None:
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as raw:
        versions = raw.request(req(18, 3, client_software_name="t", client_software_version="1"))
        assert int(versions.error_code) == 0
        raw.send(req(3, 1, topics=None))
        with pytest.raises((ConnectionError, OSError)):
            raw._read(4)
    # The broker is up and serves an authenticated client.
    topic = topic_name("sec-after")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    assert produce_consume(secure.conf("SASL_PLAINTEXT"), topic, [b"ok"]) == [b"ok"]
    assert "before SASL authentication" in secure.log()


def test_a_large_request_before_authentication_is_refused_unread(secure: SecureBroker) -> None:
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(struct.pack(">i", 64 << 20) + b"\0" * 1024)
        s.settimeout(10)
        assert s.recv(16) == b""  # closed without reading 64 MiB
    assert "larger than sasl.server.max.receive.size" in secure.log()


def _plain_v0(bootstrap: str, user: str, password: str) -> bytes | None:
    """SaslHandshake v0, then PLAIN's token as a bare frame: the broker's answer, or
    None when it closed the connection."""
    with RawClient(bootstrap) as raw:
        handshake = raw.request(req(17, 0, mechanism="PLAIN"))
        assert int(handshake.error_code) == 0
        assert "PLAIN" in handshake.mechanisms
        token = b"\0" + user.encode() + b"\0" + password.encode()
        raw.sock.sendall(struct.pack(">i", len(token)) + token)
        try:
            (size,) = struct.unpack(">i", raw._read(4))
            answer = raw._read(size)
            metadata = raw.request(req(3, 1, topics=None))
            assert len(metadata.brokers) == 1
            return answer
        except (ConnectionError, OSError):
            return None


def test_handshake_v0_takes_bare_tokens(secure: SecureBroker) -> None:
    assert _plain_v0(secure.bootstrap("SASL_PLAINTEXT"), ALICE, ALICE_PASSWORD) == b""
    assert _plain_v0(secure.bootstrap("SASL_PLAINTEXT"), ALICE, "wrong-Password-7") is None


def test_unsupported_mechanism_and_sasl_on_a_plaintext_listener(secure: SecureBroker) -> None:
    with RawClient(secure.bootstrap("SASL_PLAINTEXT")) as raw:
        answer = raw.request(req(17, 1, mechanism="GSSAPI"))
        assert int(answer.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    with RawClient(secure.bootstrap("PLAINTEXT")) as raw:
        answer = raw.request(req(17, 1, mechanism="PLAIN"))
        assert int(answer.error_code) == 34  # ILLEGAL_SASL_STATE


def test_kafka_python_over_sasl_ssl_and_ssl(secure: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = topic_name("sec-kp")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    common = {"ssl_cafile": str(secure.pki.ca_file), "ssl_check_hostname": True}
    producer = KafkaProducer(
        bootstrap_servers=secure.bootstrap("SASL_SSL"),
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=ALICE,
        sasl_plain_password=ALICE_PASSWORD,
        **common,
    )
    for i in range(10):
        producer.send(topic, b"kp-%d" % i)
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=secure.bootstrap("SSL"),
        security_protocol="SSL",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **common,
    )
    got: list[bytes] = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 10:
            break
    consumer.close()
    assert got == [b"kp-%d" % i for i in range(10)]


def test_aiokafka_over_sasl_plaintext_and_sasl_ssl(secure: SecureBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = topic_name("sec-aio")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure.bootstrap("SASL_PLAINTEXT"),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=ALICE,
            sasl_plain_password=ALICE_PASSWORD,
        )
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, b"aio-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=secure.bootstrap("SASL_SSL"),
            security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=str(secure.pki.ca_file)),
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=ALICE,
            sasl_plain_password=ALICE_PASSWORD,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 10:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(10)]


def test_kcat_over_sasl_ssl(secure: SecureBroker) -> None:
    topic = topic_name("sec-kcat")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    # PLAIN: Debian's kcat links librdkafka 2.0.2, whose SCRAM client final message
    # repeats the client nonce, which Kafka (and chronik) refuse as a nonce mismatch.
    settings = [
        "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanisms=PLAIN",
        "-X", f"sasl.username={ALICE}",
        "-X", f"sasl.password={ALICE_PASSWORD}",
        "-X", f"ssl.ca.location={secure.pki.ca_file}",
    ]
    base = ["kcat", "-b", secure.bootstrap("SASL_SSL"), *settings]
    done = subprocess.run([*base, "-P", "-t", topic], input=b"k1\nk2\n", capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*base, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"k1", b"k2"]


def _command_config(secure: SecureBroker, tmp_path: Path) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.pki.ca_file}\n"
    )
    return path


def test_users_added_listed_and_deleted_over_the_protocol(
    secure: SecureBroker, tmp_path: Path
) -> None:
    config = str(_command_config(secure, tmp_path))
    where = ["--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", config]
    done = chronik("users", "add", "bob", "--password-stdin", "--mechanism", "SCRAM-SHA-256",
                   *where, stdin="bob-Secret-9\n")
    assert done.returncode == 0, done.stderr
    listed = chronik("users", "list", *where)
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split("\t") for line in listed.stdout.splitlines())
    assert lines["bob"] == "SCRAM-SHA-256 (4096)"
    assert "SCRAM-SHA-512 (4096)" in lines[ALICE]
    topic = topic_name("sec-bob")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    bob = secure.conf("SASL_SSL", "SCRAM-SHA-256", "bob", "bob-Secret-9")
    assert produce_consume(bob, topic, [b"b1"]) == [b"b1"]
    done = chronik("users", "delete", "bob", "--mechanism", "SCRAM-SHA-256", *where)
    assert done.returncode == 0, done.stderr
    authentication_errors(bob, topic)
    missing = chronik("users", "delete", "bob", *where)
    assert missing.returncode != 0
    assert len(missing.stderr.strip().splitlines()) == 1


def test_configuration_errors_are_one_line(tmp_path: Path) -> None:
    cases = [
        ["--set", "listeners=SASL_SSL://127.0.0.1:0"],  # TLS without a key store
        ["--set", "listeners=FOO://127.0.0.1:0"],  # not in the protocol map
        ["--set", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
         "--set", "sasl.enabled.mechanisms=GSSAPI"],
    ]
    for args in cases:
        done = chronik("serve", "--data-dir", str(tmp_path / "d"), *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("chronik: error:"), done.stderr


def test_tls_store_reloaded_on_sighup(tmp_path: Path) -> None:
    sb = start_secure_broker(tmp_path)
    try:
        before = ssl.get_server_certificate(("127.0.0.1", sb.ports["SSL"]))
        sb.pki.issue("broker", "localhost", server=True)  # a new key and certificate
        assert sb.broker.proc is not None
        os.kill(sb.broker.proc.pid, __import__("signal").SIGHUP)
        deadline = time.monotonic() + 10
        while ssl.get_server_certificate(("127.0.0.1", sb.ports["SSL"])) == before:
            assert time.monotonic() < deadline, "the broker still serves the old certificate"
            time.sleep(0.2)
        assert "TLS key and trust stores reloaded" in sb.log()
    finally:
        sb.broker.kill()


def _frames(rng: random.Random) -> Iterator[bytes]:
    """Frames a hostile client might send before authenticating: random APIs and bodies,
    SaslHandshake and SaslAuthenticate with mangled tokens, v0 handshakes followed by
    absurd token sizes."""
    mechanisms = [b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512", b"GSSAPI", b"", b"\xff" * 40]
    for _ in range(400):
        kind = rng.randrange(4)
        correlation = rng.randrange(2**31)
        if kind == 0:
            body = rng.randbytes(rng.randrange(64))
            api = rng.randrange(-2, 80)
            head = struct.pack(">hhih", api, rng.randrange(-1, 14), correlation, -1)
            yield head + body
        elif kind == 1:
            mech = rng.choice(mechanisms)
            head = struct.pack(">hhih", 17, rng.randrange(0, 2), correlation, -1)
            yield head + struct.pack(">h", len(mech)) + mech
        elif kind == 2:
            token = rng.choice([
                b"n,,n=alice,r=" + rng.randbytes(8),
                rng.randbytes(40),
                b"\0alice\0" + rng.randbytes(6),
                b"c=biws,r=x,p=" + rng.randbytes(8),
            ])
            head = struct.pack(">hhih", 36, rng.randrange(0, 3), correlation, -1)
            yield head + struct.pack(">i", len(token)) + token
        else:
            yield struct.pack(">hhih", 17, 0, correlation, -1) + struct.pack(">h", 5) + b"PLAIN"


def test_hostile_frames_before_authentication_leave_the_broker_up(secure: SecureBroker) -> None:
    rng = random.Random(20261125)
    port = secure.ports["SASL_PLAINTEXT"]
    frames = list(_frames(rng))
    for i in range(0, len(frames), 4):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.settimeout(0.5)
            try:
                for frame in frames[i : i + 4]:
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                # After a v0 handshake, a bare token size: negative or absurd.
                sock.sendall(struct.pack(">i", rng.choice([-1, 2**31 - 1, 10**6, 0])))
                sock.recv(4096)
            except OSError:
                pass
    assert secure.broker.running
    topic = topic_name("sec-fuzzed")
    create_topic(secure.bootstrap("PLAINTEXT"), topic)
    conf = secure.conf("SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert produce_consume(conf, topic, [b"up"]) == [b"up"]
    assert "Traceback" not in secure.log()


@needs_java
def test_java_kafka_clients_over_sasl_ssl_and_mutual_tls(
    secure: SecureBroker, tmp_path: Path
) -> None:
    """Java's default producer (idempotent, acks=all) over SASL_SSL with SCRAM-SHA-512,
    and its consumer over SSL with a client certificate from a PEM key store."""
    classpath = compile_java(tmp_path / "classes", JAVA_CLIENT)
    sasl = tmp_path / "sasl.properties"
    sasl.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ALICE}" password="{ALICE_PASSWORD}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.pki.ca_file}\n"
    )
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secure.pki.ca_file}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={secure.client_pem}\n"
    )
    topic = topic_name("sec-java")
    lines = "".join(f"{1_700_000_000_000 + i}\tay0=\t{_b64(b'java-%d' % i)}\t\n" for i in range(12))

    def run(config: Path, *args: str, stdin: str | None = None) -> list[list[str]]:
        done = subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "ChronikClient",
             *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=JAVA_TIMEOUT,
            env={**os.environ, "CHRONIK_CLIENT_CONFIG": str(config)},
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return [line.split("\t") for line in done.stdout.splitlines()]

    sent = run(sasl, "produce", secure.bootstrap("SASL_SSL"), topic, "1", stdin=lines)
    assert [int(o) for kind, _, o in sent if kind == "sent"] == list(range(12))
    got = run(mtls, "consume", secure.bootstrap("SSL"), topic, "1", "12")
    assert [base64.b64decode(f[5]) for f in got] == [b"java-%d" % i for i in range(12)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_client_certificates_mapped_by_principal_rules(tmp_path: Path) -> None:
    """ssl.client.auth=required: a client without a certificate is refused; with rules
    and no DEFAULT, a certificate no rule maps is refused with a log line, one that a
    rule maps is served."""
    sb = start_secure_broker(
        tmp_path,
        **{"ssl.client.auth": "required",
           "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ops,O=.*$/$1/L"},
    )
    try:
        topic = topic_name("sec-principal")
        create_topic(sb.bootstrap("PLAINTEXT"), topic)
        ops = sb.pki.issue("ops", "Deployer", unit="ops")

        def with_cert(pem: Path | None) -> dict[str, Any]:
            conf = {**sb.conf("SSL"), "message.timeout.ms": 1500}
            if pem is not None:
                conf.update({"ssl.certificate.location": str(pem), "ssl.key.location": str(pem)})
            return conf

        assert produce_consume(with_cert(ops), topic, [b"p1"]) == [b"p1"]
        for pem in (None, sb.client_pem):  # no certificate; OU=eng, which no rule maps
            failed: list[object] = []
            producer = Producer(with_cert(pem))
            producer.produce(topic, b"refused", on_delivery=lambda err, _m, f=failed: f.append(err))
            producer.flush(5)
            assert failed and failed[0] is not None
        assert end_offset(sb.bootstrap("PLAINTEXT"), topic) == 1
        assert "no ssl.principal.mapping.rules rule matches CN=alice,OU=eng" in sb.log()
    finally:
        sb.broker.kill()


def test_user_change_on_a_full_disk_is_an_error_code_not_a_closed_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AlterUserScramCredentials while the credentials file cannot be written: the
    client hears an error for the user, nothing changes, and once the disk has room
    again the same change works."""
    import errno

    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from chronik.broker.embedded import EmbeddedBroker
    from chronik.storage import diskio

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-Secret-5"
    )
    with EmbeddedBroker(tmp_path / "data") as embedded:
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap})
        # The credentials file is replaced through diskio.replace_file; segment writes
        # bound write_all at import and are not affected.
        monkeypatch.setattr(diskio, "write_all", full)
        with pytest.raises(KafkaException) as refused:
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(30)
        assert refused.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        assert "No space left on device" in refused.value.args[0].str()
        monkeypatch.undo()
        assert admin.describe_user_scram_credentials().result(30) == {}
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)
        assert set(admin.describe_user_scram_credentials().result(30)) == {"dave"}
