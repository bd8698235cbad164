"""What TLS, SASL and ACLs cost on one chronik broker: produce and consume throughput over
SSL and SASL_SSL (SCRAM-SHA-512) against PLAINTEXT, and over SASL_SSL as a user whose
every request is checked against ACLs, side by side in one run on the same broker with
the same confluent-kafka workload.

    python bench/security_bench.py            # about a minute
    python bench/security_bench.py --quick    # smoke run
    python bench/security_bench.py --runs 3 --baseline ../main   # A/B against another checkout

The broker has three listeners (PLAINTEXT, SSL, SASL_SSL), a certificate made with the
openssl command, two SCRAM users and an authorizer: anonymous clients and the first
user are super users (their decisions stop at the super-user check, as without an
authorizer), the second user may write and read the bench topics and groups through
PREFIXED ACLs, among a few hundred ACLs for other principals and topics. For each
listener in turn one producer (acks=all, idempotent, no compression, linger.ms=5)
writes N records of 1,000 bytes over 6 partitions (after a warm-up of N/20), then one
consumer reads them back from the start (timed from its first delivery). TLS is TLS 1.3
with OpenSSL's default cipher on both sides. Each figure is the best of `--runs`, with the
broker's CPU milliseconds per 1,000 records (median), how often its event loop was woken
per 1,000 records (voluntary context switches of its main thread, median) and the
clients' CPU (this process) per 1,000 records. With ``--baseline DIR`` a second broker,
from another checkout's src/, runs the same workloads in the same run, the two taking
turns round by round: a change measured before and after.

The limit OpenSSL sets: the cipher the handshake chose, its speed on 16 KiB records from
`openssl speed -evp`, and from it the time one encryption and one decryption of the
workload's bytes take, against the time SSL adds to PLAINTEXT (the gap): the share of the
gap that is OpenSSL's own work. Prints tables and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
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

from brokers import REPO, Chronik, chronik_command, free_port  # noqa: E402
from transactions_bench import run_arguments, timed_produce, write_report  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PARTITIONS = 6
VALUE = b"x" * 1000
USER, PASSWORD = "bench", "bench-secret-1"
ACL_USER, ACL_PASSWORD = "checked", "checked-secret-1"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_SSL+ACLs")
# ACLs for other principals and topics, so decisions look through a realistic set.
OTHER_ACLS = 300
# openssl speed's name for the cipher of a TLS suite.
EVP_CIPHERS = {"AES_256_GCM": "aes-256-gcm", "AES128-GCM": "aes-128-gcm",
               "AES256-GCM": "aes-256-gcm", "AES_128_GCM": "aes-128-gcm",
               "CHACHA20": "chacha20-poly1305"}
TLS_RECORD = 16_384


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

    def __init__(self, ca: Path, keystore: Path, name: str = "chronik",
                 src: Path = REPO / "src") -> None:
        super().__init__(name, src)
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


def broker_cpu(pid: int) -> float:
    """CPU seconds (user and system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    """CPU seconds this process (the clients: librdkafka's threads and Python's) has used."""
    times = os.times()
    return times.user + times.system


def broker_wakeups(pid: int) -> int:
    """How often the broker's event-loop thread has gone to sleep and been woken
    (voluntary context switches of its main thread)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def negotiated(port: int, ca: Path) -> tuple[str, str]:
    """The TLS version and suite a client with OpenSSL's defaults gets from the broker."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        cipher = tls.cipher()
    assert cipher is not None
    return cipher[1], cipher[0]


def openssl_speed(suite: str) -> tuple[str, float, float]:
    """The suite's cipher and `openssl speed`'s bytes per second on 16 KiB records,
    encrypting and decrypting."""
    evp = next((v for k, v in EVP_CIPHERS.items() if k in suite), "aes-256-gcm")
    rates = []
    for extra in ([], ["-decrypt"]):
        out = subprocess.run(
            ["openssl", "speed", *extra, "-seconds", "1", "-bytes", str(TLS_RECORD), "-evp", evp],
            capture_output=True, text=True, check=True,
        ).stdout
        rates.append(float(out.strip().splitlines()[-1].split()[-1].rstrip("k")) * 1000)
    return evp, rates[0], rates[1]


def measure(broker: SecureChronik, admin: AdminClient, listener: str, count: int,
            rates: dict[str, list[float]], cpu: dict[str, list[float]],
            wakeups: dict[str, list[float]], clients: dict[str, list[float]]) -> None:
    topic = f"sec-{listener.lower().replace('+', '-')}-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    conf = broker.client(listener)
    assert broker.proc is not None
    pid = broker.proc.pid
    before, woke_before, client_before = broker_cpu(pid), broker_wakeups(pid), client_cpu()
    rates.setdefault(f"produce {listener}", []).append(produce(conf, topic, count))
    middle, woke_middle, client_middle = broker_cpu(pid), broker_wakeups(pid), client_cpu()
    total = count + warmup(count)
    rates.setdefault(f"consume {listener}", []).append(consume(conf, topic, total))
    after, woke_after, client_after = broker_cpu(pid), broker_wakeups(pid), client_cpu()
    clients.setdefault(f"produce {listener}", []).append(
        (client_middle - client_before) * 1000 / total)
    clients.setdefault(f"consume {listener}", []).append(
        (client_after - client_middle) * 1000 / total)
    wakeups.setdefault(f"produce {listener}", []).append(
        (woke_middle - woke_before) * 1000 / total)
    wakeups.setdefault(f"consume {listener}", []).append(
        (woke_after - woke_middle) * 1000 / total)
    # Per 1,000 records, warm-up and connection setup included (the same for every listener).
    cpu.setdefault(f"produce {listener}", []).append((middle - before) * 1000 / total)
    cpu.setdefault(f"consume {listener}", []).append((after - middle) * 1000 / total)
    # The next listener's row reuses the pages this topic's files free rather than
    # writing into a page cache grown by every row before it (dearer on a VM whose host
    # backs guest memory lazily; see replication_bench.py).
    admin.delete_topics([topic])[topic].result(30)


def main() -> int:
    def extend(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--baseline", type=Path,
                            help="another chronik checkout (its src/) run beside this one")

    args, count, runs = run_arguments(__doc__, 3_000, extend)
    if args.baseline is not None and not (args.baseline / "src" / "chronik").is_dir():
        raise SystemExit(f"--baseline {args.baseline}: no src/chronik there")
    names = ["chronik"] + (["baseline"] if args.baseline is not None else [])
    rates: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    woke: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    clients: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    load = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory(prefix="chronik-security-bench-") as tmp:
        ca, keystore = make_certificates(Path(tmp))
        brokers = {
            name: SecureChronik(
                ca, keystore, name,
                REPO / "src" if name == "chronik" else args.baseline.resolve() / "src",
            )
            for name in names
        }
        try:
            for broker in brokers.values():
                broker.start()
                for port in broker.ports.values():
                    socket.create_connection(("127.0.0.1", port), timeout=10).close()
            version, suite = negotiated(brokers["chronik"].ports["SSL"], ca)
            admins = {name: AdminClient({"bootstrap.servers": b.bootstrap})
                      for name, b in brokers.items()}
            for admin in admins.values():
                grant(admin)
            for run in range(runs):
                # Turn about, so that neither broker always goes first.
                for name in names if run % 2 == 0 else names[::-1]:
                    for listener in LISTENERS:
                        measure(brokers[name], admins[name], listener, count, rates[name],
                                cpu[name], woke[name], clients[name])
        finally:
            for broker in brokers.values():
                broker.stop()
    evp, encrypt_rate, decrypt_rate = openssl_speed(suite)
    results = {name: {k: max(v) for k, v in rates[name].items()} for name in names}
    cpu_per_k = {name: {k: statistics.median(v) for k, v in cpu[name].items()} for name in names}
    woke_per_k = {name: {k: statistics.median(v) for k, v in woke[name].items()}
                  for name in names}
    client_per_k = {name: {k: statistics.median(v) for k, v in clients[name].items()}
                    for name in names}
    ratios = {
        name: {
            f"{kind} {listener}": results[name][f"{kind} {listener}"]
            / results[name][f"{kind} PLAINTEXT"]
            for kind in ("produce", "consume") for listener in LISTENERS[1:]
        }
        for name in names
    }
    print(f"{count} records of {len(VALUE)} bytes, {PARTITIONS} partitions, best of {runs}; "
          f"load average {' '.join(load)} at the start")
    header = (f"{'':26}{'records/s':>12}{'of PLAINTEXT':>14}{'broker ms/1k':>14}"
              f"{'wakeups/1k':>12}{'client ms/1k':>14}")
    if args.baseline is not None:
        header += (f"{'baseline rec/s':>16}{'of PLAINTEXT':>14}{'broker ms/1k':>14}"
                   f"{'wakeups/1k':>12}{'ratio':>8}")
    print(header)
    for row, rate in results["chronik"].items():
        ratio = ratios["chronik"].get(row)
        line = (f"{row:26}{rate:>12,.0f}" + (f"{ratio:>13.2f}x" if ratio else " " * 14)
                + f"{cpu_per_k['chronik'][row] * 1000:>14.1f}"
                + f"{woke_per_k['chronik'][row]:>12.0f}"
                + f"{client_per_k['chronik'][row] * 1000:>14.1f}")
        if args.baseline is not None:
            base = results["baseline"][row]
            base_ratio = ratios["baseline"].get(row)
            line += (f"{base:>16,.0f}" + (f"{base_ratio:>13.2f}x" if base_ratio else " " * 14)
                     + f"{cpu_per_k['baseline'][row] * 1000:>14.1f}"
                     + f"{woke_per_k['baseline'][row]:>12.0f}{rate / base:>7.2f}x")
        print(line)
    for kind in ("produce", "consume"):
        acl = results["chronik"][f"{kind} SASL_SSL+ACLs"] / results["chronik"][f"{kind} SASL_SSL"]
        ratios["chronik"][f"{kind} ACLs checked vs super user"] = acl
        print(f"{kind}: ACLs checked at {acl:.2f}x of a super user's throughput")
    # OpenSSL's share: each byte is encrypted once by the sender and decrypted once by
    # the receiver; against the wall time SSL adds to the same workload over PLAINTEXT.
    crypto_seconds = count * len(VALUE) * (1 / encrypt_rate + 1 / decrypt_rate)
    limit: dict[str, dict[str, float]] = {}
    print(f"{version} {suite}; openssl speed -evp {evp}, 16 KiB: "
          f"{encrypt_rate / 1e9:.2f} GB/s encrypt, {decrypt_rate / 1e9:.2f} GB/s decrypt")
    for kind in ("produce", "consume"):
        plain = count / results["chronik"][f"{kind} PLAINTEXT"]
        tls = count / results["chronik"][f"{kind} SSL"]
        gap = tls - plain
        limit[kind] = {
            "plaintext_s": plain, "ssl_s": tls, "openssl_s": crypto_seconds,
            "openssl_share_of_gap": crypto_seconds / gap if gap > 0 else None,
            "ratio_with_openssl_only": plain / (plain + crypto_seconds),
            # The client's own CPU per record over PLAINTEXT against over SSL: with a
            # broker that added nothing for TLS, the client alone would run at this ratio
            # (it is the side that limits produce on this machine).
            "client_cpu_ratio": client_per_k["chronik"][f"{kind} PLAINTEXT"]
            / client_per_k["chronik"][f"{kind} SSL"]
            if client_per_k["chronik"][f"{kind} SSL"] > 0 else None,
        }
        share = limit[kind]["openssl_share_of_gap"]
        client_ratio = limit[kind]["client_cpu_ratio"]
        print(f"{kind}: PLAINTEXT {plain:.3f}s, SSL {tls:.3f}s for {count} records; OpenSSL's "
              f"encryption and decryption {crypto_seconds:.3f}s = "
              + (f"{share:.0%} of the gap" if share is not None else "no gap")
              + "; with nothing but "
              f"OpenSSL added SSL would run at {limit[kind]['ratio_with_openssl_only']:.2f}x; "
              "the client's CPU per record PLAINTEXT/SSL: "
              + (f"{client_ratio:.2f}x" if client_ratio is not None else "not measured"))
    write_report(
        args, "security", records=count, record_bytes=len(VALUE), runs=runs,
        load_average=load, records_per_s=results["chronik"],
        ratios_to_plaintext=ratios["chronik"],
        broker_cpu_ms_per_1000_records={n: {k: v * 1000 for k, v in c.items()}
                                        for n, c in cpu_per_k.items()},
        broker_wakeups_per_1000_records=woke_per_k,
        client_cpu_ms_per_1000_records={n: {k: v * 1000 for k, v in c.items()}
                                        for n, c in client_per_k.items()},
        baseline={"src": str(args.baseline), "records_per_s": results["baseline"],
                  "ratios_to_plaintext": ratios["baseline"]}
        if args.baseline is not None else None,
        tls={"version": version, "suite": suite, "openssl_speed_evp": evp,
             "encrypt_bytes_per_s": encrypt_rate, "decrypt_bytes_per_s": decrypt_rate,
             "limit": limit},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
