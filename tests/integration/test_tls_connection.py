"""The broker's TLS connection layer at its edges, against a broker process with an SSL
listener: request bodies arriving in small TLS records with pauses (the socket's wake-up
mark, SO_RCVLOWAT, must never wait for bytes that are not coming), a client that closes
or half-closes in the middle of a record, a close_notify and a renegotiation halfway
through a body, handshakes that fail, a request of many megabytes, and a client that
sends Fetch requests and never reads the answers."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.produce.v9.response import ProduceResponse

from chronik.records.builder import Record, build_batch
from conftest import BrokerProcess, free_port

from .helpers import create_topic, topic_name
from .rawclient import encode_request
from .test_bad_input import produce_request
from .test_limits import _fetch_request, _rss_mib
from .tls_support import Pki, make_pki

MIB = 1 << 20


class TLSBroker:
    def __init__(self, broker: BrokerProcess, pki: Pki, ssl_port: int) -> None:
        self.broker, self.pki, self.ssl_port = broker, pki, ssl_port

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    def conf(self, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.ssl_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_file),
            **extra,
        }

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.ca_file))

    def connect(self, timeout: float = 10) -> ssl.SSLSocket:
        sock = socket.create_connection(("127.0.0.1", self.ssl_port), timeout=timeout)
        return self.context().wrap_socket(sock, server_hostname="127.0.0.1")

    def log(self) -> str:
        return self.broker.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSBroker]:
    tmp = tmp_path_factory.mktemp("tls-connection")
    pki = make_pki(tmp / "pki")
    broker_pem = pki.issue("broker", "localhost", server=True)
    broker = BrokerProcess(tmp / "data")
    ssl_port = free_port()
    broker.config.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_file),
            "message.max.bytes": str(16 * MIB),
            "offsets.topic.num.partitions": "1",
        }
    )
    broker.start()
    socket.create_connection(("127.0.0.1", ssl_port), timeout=10).close()
    try:
        yield TLSBroker(broker, pki, ssl_port)
    finally:
        broker.kill()


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def api_versions_ok(tls: TLSBroker) -> bool:
    with tls.connect() as sock:
        request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        sock.sendall(encode_request(request, correlation_id=7))
        frame = read_frame(sock)
    return struct.unpack_from(">ih", frame, 0) == (7, 0)


def closed_by_broker(sock: socket.socket, timeout: float) -> bool:
    """Whether the broker closes the connection within ``timeout`` seconds (anything it
    sends before that is read and dropped)."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except (TimeoutError, ssl.SSLWantReadError):
            continue
        except (ConnectionError, ssl.SSLError, OSError):
            return True
    return False


def big_produce(topic: str, records: int, value_size: int) -> bytes:
    """One Produce request (acks=1) whose batch holds ``records`` random values."""
    rng = random.Random(records)
    values = [rng.randbytes(value_size) for _ in range(records)]
    batch = build_batch([Record(int(time.time() * 1000), None, v) for v in values])
    return encode_request(produce_request(topic, bytes(batch)), correlation_id=11)


def produce_error(frame: bytes) -> int:
    from kio.serial import entity_reader

    response, _ = entity_reader(ProduceResponse)(frame, 5)  # flexible header: id, tags
    return int(response.responses[0].partition_responses[0].error_code)


def end_offset(tls: TLSBroker, topic: str) -> int:
    consumer = Consumer(tls.conf(**{"group.id": "tls-probe"}))
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


@pytest.mark.parametrize("piece", [1000, 16384, 100_000])
def test_a_body_in_small_records_with_pauses_is_answered(tls: TLSBroker, piece: int) -> None:
    """The body is sent in writes of ``piece`` bytes (each a TLS record or more), with
    pauses where a wake-up mark is set: most of the body left, 100 KB left (a mark below
    it), 70 KB and 20 KB left (no mark), a few bytes left. Each pause is longer than a
    turn of the broker's loop, so a mark set beyond the bytes that come would hang."""
    topic = topic_name("tls-pieces")
    create_topic(tls.broker.bootstrap, topic)
    frame = big_produce(topic, 1200, 1000)
    pauses = {len(frame) - left for left in (600_000, 100_000, 70_000, 20_000, 10)}
    with tls.connect() as sock:
        sent = 0
        while sent < len(frame):
            stop = min(sent + piece, len(frame))
            cut = next((p for p in sorted(pauses) if sent < p < stop), None)
            if cut is not None:
                sock.sendall(frame[sent:cut])
                sent = cut
                time.sleep(0.3)
                continue
            sock.sendall(frame[sent:stop])
            sent = stop
        sock.settimeout(20)
        assert produce_error(read_frame(sock)) == 0
    assert end_offset(tls, topic) == 1200


class MemoryTLS:
    """A TLS client whose ciphertext the test sends itself, so that it can stop in the
    middle of a record."""

    def __init__(self, tls: TLSBroker) -> None:
        self.sock = socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = tls.context().wrap_bio(
            self.incoming, self.outgoing, server_hostname="127.0.0.1"
        )
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                assert data, "closed during the handshake"
                self.incoming.write(data)
        self.sock.sendall(self.outgoing.read())

    def encrypt(self, data: bytes) -> bytes:
        self.tls.write(data)
        return self.outgoing.read()


@pytest.mark.parametrize("how", ["half-close", "close"])
def test_a_client_that_stops_in_the_middle_of_a_record(tls: TLSBroker, how: str) -> None:
    """2 MiB announced, 1 MiB and half of the next record sent: the broker is waiting
    with a wake-up mark set. A half-close must still wake it and close the connection;
    a close must leave it serving others."""
    client = MemoryTLS(tls)
    body = os.urandom(2 * MIB)
    head = client.encrypt(struct.pack(">i", len(body)) + body[: MIB])
    record = client.encrypt(body[MIB : MIB + 16384])
    client.sock.sendall(head + record[: len(record) // 2])
    time.sleep(0.3)
    if how == "half-close":
        client.sock.shutdown(socket.SHUT_WR)
        assert closed_by_broker(client.sock, timeout=10)
    client.sock.close()
    assert api_versions_ok(tls)
    assert "Traceback" not in tls.log()


def test_a_close_notify_in_the_middle_of_a_body_is_answered(tls: TLSBroker) -> None:
    """A client that ends TLS with close_notify halfway through a body and waits for the
    broker's own close_notify (as ``SSLSocket.unwrap`` does) gets it, though the few
    bytes of its alert do not reach the broker's wake-up mark."""
    client = MemoryTLS(tls)
    body = os.urandom(2 * MIB)
    client.sock.sendall(client.encrypt(struct.pack(">i", len(body)) + body[:MIB]))
    time.sleep(0.3)
    with contextlib.suppress(ssl.SSLWantReadError):
        client.tls.unwrap()
    client.sock.sendall(client.outgoing.read())
    client.sock.settimeout(10)
    answered = False
    while not answered:
        data = client.sock.recv(65536)
        assert data, "closed without a close_notify"
        client.incoming.write(data)
        with contextlib.suppress(ssl.SSLWantReadError):
            client.tls.unwrap()
            answered = True
    client.sock.close()
    assert api_versions_ok(tls)


def test_renegotiation_in_the_middle_of_a_body_is_refused(tls: TLSBroker) -> None:
    """TLS 1.2 renegotiation started by the client (openssl s_client's R command) halfway
    through a 200,000-byte body: refused with an alert, as between requests, and at once."""
    client = subprocess.Popen(
        ["openssl", "s_client", "-connect", tls.ssl_bootstrap, "-tls1_2",
         "-CAfile", str(tls.pki.ca_file)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        # A size prefix of 200,000 and 100,000 bytes of the body, then R on its own line.
        client.stdin.write(struct.pack(">i", 200_000) + (b"A" * 99 + b"\n") * 1000)
        client.stdin.flush()
        time.sleep(0.5)
        started = time.monotonic()
        client.stdin.write(b"R\n")
        client.stdin.flush()
        out, _ = client.communicate(timeout=20)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert b"RENEGOTIATING" in out
    assert b"no renegotiation" in out
    assert time.monotonic() - started < 10
    assert api_versions_ok(tls)


def test_failed_handshakes_close_the_connection_and_leave_the_broker_serving(
    tls: TLSBroker,
) -> None:
    # A plaintext Kafka request on the SSL port.
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as plain:
        plain.sendall(encode_request(request))
        assert closed_by_broker(plain, timeout=10)
    # A client that does not trust the broker's certificate gives up in the handshake.
    untrusted = ssl.create_default_context()
    with (
        socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        untrusted.wrap_socket(raw, server_hostname="127.0.0.1")
    # A ClientHello, then the connection closed in the middle of the handshake.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello = tls.context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        hello.do_handshake()
    with socket.create_connection(("127.0.0.1", tls.ssl_port), timeout=10) as raw:
        raw.sendall(outgoing.read())
        raw.recv(100)
    # A confluent-kafka client without the CA reports an SSL error, writes nothing.
    topic = topic_name("tls-handshake")
    create_topic(tls.broker.bootstrap, topic)
    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": tls.ssl_bootstrap, "security.protocol": "SSL",
        "message.timeout.ms": 3000, "error_cb": lambda e: errors.append(str(e)),
    })
    producer.produce(topic, b"must not land")
    producer.flush(10)
    assert any("SSL" in e or "certificate" in e for e in errors), errors
    assert end_offset(tls, topic) == 0
    assert "TLS handshake with 127.0.0.1 failed" in tls.log()
    assert api_versions_ok(tls)
    assert "Traceback" not in tls.log()


def test_a_request_of_many_megabytes_and_one_over_the_limit(tls: TLSBroker) -> None:
    topic = topic_name("tls-huge")
    create_topic(tls.broker.bootstrap, topic, **{"max.message.bytes": str(16 * MIB)})
    huge = os.urandom(12 * MIB)
    small = [os.urandom(1000) for _ in range(2000)]
    producer = Producer(tls.conf(**{"message.max.bytes": 16 * MIB, "linger.ms": 5}))
    producer.produce(topic, huge, partition=0)
    for value in small:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer(tls.conf(**{
        "group.id": topic_name("tls-huge-g"), "fetch.message.max.bytes": 16 * MIB,
        "fetch.max.bytes": 64 * MIB, "receive.message.max.bytes": 80 * MIB,
    }))
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 2001 and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    digest = hashlib.sha256
    assert [digest(v).digest() for v in got] == [digest(v).digest() for v in [huge, *small]]
    # A size prefix over socket.request.max.bytes (100 MiB) closes the connection unread.
    with tls.connect() as sock:
        sock.sendall(struct.pack(">i", 200 * MIB))
        assert closed_by_broker(sock, timeout=10)
    assert api_versions_ok(tls)


def test_a_client_that_never_reads_its_fetch_responses(tls: TLSBroker) -> None:
    """32 pipelined Fetch requests of 8 MiB over TLS, none read: the broker holds one
    response at a time (its memory stays bounded) and serves another client meanwhile."""
    topic = topic_name("tls-greedy")
    create_topic(tls.broker.bootstrap, topic, **{"max.message.bytes": str(8 * MIB)})
    producer = Producer({"bootstrap.servers": tls.broker.bootstrap, "linger.ms": 0,
                         "message.max.bytes": 8 * MIB})
    for _ in range(6):
        producer.produce(topic, os.urandom(6 * MIB), partition=0)
        assert producer.flush(30) == 0
    greedy = tls.connect()
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        greedy.sendall(encode_request(_fetch_request(topic, {0: 0}, 8 * MIB, 8 * MIB)) * 32)
        peak = 0.0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            peak = max(peak, _rss_mib(tls.broker.proc.pid))
            time.sleep(0.05)
        assert peak < 600, f"broker RSS reached {peak:.0f} MiB"
        consumer = Consumer(tls.conf(**{"group.id": topic_name("tls-other"),
                                        "fetch.message.max.bytes": 8 * MIB}))
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 6 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(10, 0.5) if m.error() is None)
        consumer.close()
        assert got == 6
    finally:
        greedy.close()
    assert api_versions_ok(tls)
