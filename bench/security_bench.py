"""What TLS, SASL and ACLs cost on one chronik broker: produce and consume throughput over
SSL and SASL_SSL (SCRAM-SHA-512) against PLAINTEXT, and over SASL_SSL as a user whose
every request is checked against ACLs, side by side in one run on the same broker with
the same confluent-kafka workload.

    python bench/security_bench.py            # about a minute
    python bench/security_bench.py --quick    # smoke run

The broker has three listeners (PLAINTEXT, SSL, SASL_SSL), a certificate made with the
openssl command, two SCRAM users and an authorizer: anonymous clients and the first
user are super users (their decisions stop at the super-user check, as without an
authorizer), the second user may write and read the bench topics and groups through
PREFIXED ACLs, among a few hundred ACLs for other principals and topics. For each
listener in turn one producer (acks=all, idempotent, no compression, linger.ms=5)
writes N records of 1,000 bytes over 6 partitions (after a warm-up of N/20), then one
consumer reads them back from the start (timed from its first delivery). TLS is TLS 1.3
with OpenSSL's default cipher on both sides. Each figure is the best of `--runs`. Prints a
table and writes JSON to bench/results/.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Chronik, chronik_command, free_port  # noqa: E402
from transactions_bench import run_arguments, timed_produce, write_report  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PARTITIONS = 6
VALUE = b"x" * 1000
USER, PASSWORD = "bench", "bench-secret-1"
ACL_USER, ACL_PASSWORD = "checked", "checked-secret-1"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_SSL+ACLs")
# ACLs for other principals and topics, so decisions look through a realistic set.
OTHER_ACLS = 300


def make_certificates(directory: Path) -> tuple[Path, Path]:
    """A CA and a broker key and certificate for 127.0.0.1, with the openssl command."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=bench CA", "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "broker.key", "-out", "broker.csr")
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "broker.crt")
    pem = directory / "broker.pem"
    key, cert = (directory / "broker.key").read_bytes(), (directory / "broker.crt").read_bytes()
    pem.write_bytes(key + cert)
    return directory / "ca.pem", pem


class SecureChronik(Chronik):
    """A chronik broker with a PLAINTEXT, an SSL and a SASL_SSL listener."""

    def __init__(self, ca: Path, keystore: Path) -> None:
        super().__init__()
        self.ports = {"PLAINTEXT": self.port, "SSL": free_port(), "SASL_SSL": free_port()}
        self.ca, self.keystore = ca, keystore

    def command(self) -> list[str]:
        data_dir = self.workdir / "data"
        for user, password in ((USER, PASSWORD), (ACL_USER, ACL_PASSWORD)):
            subprocess.run(
                [*chronik_command(), "users", "add", user, "--password-stdin", "--mechanism",
                 "SCRAM-SHA-512", "--data-dir", str(data_dir)],
                input=password + "\n", text=True, check=True, capture_output=True,
                env=self.env(),
            )
        listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        return [
            *chronik_command(), "serve", "--data-dir", str(data_dir),
            "--set", f"listeners={listeners}",
            "--set", f"ssl.keystore.location={self.keystore}",
            "--set", f"ssl.truststore.location={self.ca}",
            "--set", "authorizer.class.name=chronik",
            "--set", f"super.users=User:ANONYMOUS;User:{USER}",
        ]

    def client(self, listener: str) -> dict[str, Any]:
        user, password = USER, PASSWORD
        if listener == "SASL_SSL+ACLs":
            listener, user, password = "SASL_SSL", ACL_USER, ACL_PASSWORD
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
            "security.protocol": listener,
        }
        if listener != "PLAINTEXT":
            conf["ssl.ca.location"] = str(self.ca)
        if listener == "SASL_SSL":
            conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                         "sasl.password": password})
        return conf


def grant(admin: AdminClient) -> None:
    """The checked user's ACLs on the bench's topics and groups, among others'."""
    def binding(kind: ResourceType, name: str, pattern: ResourcePatternType, who: str,
                op: AclOperation) -> AclBinding:
        return AclBinding(kind, name, pattern, who, "*", op, AclPermissionType.ALLOW)

    prefixed, literal = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
    acls = [
        binding(ResourceType.TOPIC, "sec-", prefixed, f"User:{ACL_USER}", AclOperation.WRITE),
        binding(ResourceType.TOPIC, "sec-", prefixed, f"User:{ACL_USER}", AclOperation.READ),
        binding(ResourceType.GROUP, "bench-", prefixed, f"User:{ACL_USER}", AclOperation.READ),
    ]
    acls += [
        binding(ResourceType.TOPIC, f"other-{i}", literal, f"User:u{i % 17}", AclOperation.READ)
        for i in range(OTHER_ACLS)
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)


def warmup(count: int) -> int:
    return max(count // 20, 100)


def produce(conf: dict[str, Any], topic: str, count: int) -> float:
    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000})
    # Connected, authenticated, with a producer id and warm batches before the clock starts.
    for i in range(warmup(count)):
        p.produce(topic, key=b"w%d" % i, value=VALUE)
    assert p.flush(60) == 0
    return timed_produce(p, topic, count, VALUE)


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    """Records per second from the first delivery on (connection setup and the first
    offset lookup are not counted, nor the records of that first delivery)."""
    c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = timed = 0
    start = 0.0
    deadline = time.monotonic() + 120
    while got < count and time.monotonic() < deadline:
        n = sum(1 for m in c.consume(min(1_000, count - got), 0.5) if m.error() is None)
        if n and not start:
            start = time.perf_counter()
        elif start:
            timed += n
        got += n
    elapsed = time.perf_counter() - start
    c.close()
    if got < count or not timed:
        raise RuntimeError(f"read {got} of {count}")
    return timed / elapsed


def main() -> int:
    args, count, runs = run_arguments(__doc__, 3_000)
    with tempfile.TemporaryDirectory(prefix="chronik-security-bench-") as tmp:
        ca, keystore = make_certificates(Path(tmp))
        broker = SecureChronik(ca, keystore)
        broker.start()
        try:
            for port in broker.ports.values():
                socket.create_connection(("127.0.0.1", port), timeout=10).close()
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            grant(admin)
            best: dict[str, list[float]] = {}
            for _ in range(runs):
                for listener in LISTENERS:
                    topic = f"sec-{listener.lower().replace('+', '-')}-{uuid.uuid4().hex[:6]}"
                    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
                    conf = broker.client(listener)
                    best.setdefault(f"produce {listener}", []).append(produce(conf, topic, count))
                    total = count + warmup(count)
                    best.setdefault(f"consume {listener}", []).append(consume(conf, topic, total))
            results = {k: max(v) for k, v in best.items()}
        finally:
            broker.stop()
    ratios = {
        f"{kind} {listener}": results[f"{kind} {listener}"] / results[f"{kind} PLAINTEXT"]
        for kind in ("produce", "consume") for listener in LISTENERS[1:]
    }
    print(f"{count} records of {len(VALUE)} bytes, {PARTITIONS} partitions, best of {runs}")
    print(f"{'':26}{'records/s':>12}{'of PLAINTEXT':>14}")
    for name, rate in results.items():
        ratio = ratios.get(name)
        print(f"{name:26}{rate:>12,.0f}" + (f"{ratio:>13.2f}x" if ratio else ""))
    for kind in ("produce", "consume"):
        acl = results[f"{kind} SASL_SSL+ACLs"] / results[f"{kind} SASL_SSL"]
        ratios[f"{kind} ACLs checked vs super user"] = acl
        print(f"{kind}: ACLs checked at {acl:.2f}x of a super user's throughput")
    write_report(
        args, "security", records=count, record_bytes=len(VALUE), runs=runs,
        records_per_s=results, ratios_to_plaintext=ratios,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
