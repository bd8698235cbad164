"""Security in a three-broker cluster: every broker has a PLAINTEXT and a SASL_SSL
listener; the users live in ZooKeeper's /config/users as Kafka keeps them, so a user
made through one broker (or written to ZooKeeper before the cluster starts) is known
to every broker, and each client is told the endpoints of its own listener."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from conftest import free_port

from .cluster_support import Cluster
from .replication_support import create_replicated_topic
from .test_security import ADMIN, ADMIN_PASSWORD, authentication_errors, produce_consume
from .tls_support import make_pki

ROOT = Path(__file__).resolve().parents[2]


def test_users_in_zookeeper_serve_every_broker(zookeeper, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    keystore = pki.issue("broker", "localhost", server=True)
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3)
    sasl_ports: dict[int, int] = {}
    for i, broker in cluster.brokers.items():
        sasl_ports[i] = free_port()
        broker.config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                         f"SASL_SSL://127.0.0.1:{sasl_ports[i]}",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.location": str(pki.ca_file),
            "connection.failed.authentication.delay.ms": "20",
        })
    # The first user, written to ZooKeeper before any broker starts.
    done = subprocess.run(
        [sys.executable, "-m", "chronik", "users", "add", ADMIN, "--password-stdin",
         "--zookeeper", zookeeper.connect + cluster.chroot],
        input=ADMIN_PASSWORD + "\n", capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    cluster.start()
    try:
        stored = cluster.get_json(f"/config/users/{ADMIN}")
        assert stored["version"] == 1
        assert set(stored["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert stored["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
        registration = cluster.get_json("/brokers/ids/2")
        assert registration["endpoints"] == [
            f"PLAINTEXT://127.0.0.1:{cluster.broker(2).port}",
            f"SASL_SSL://127.0.0.1:{sasl_ports[2]}",
        ]
        assert registration["listener_security_protocol_map"]["SASL_SSL"] == "SASL_SSL"

        def conf(i: int, user: str, password: str) -> dict[str, object]:
            return {
                "bootstrap.servers": f"127.0.0.1:{sasl_ports[i]}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca_file),
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user,
                "sasl.password": password,
            }

        admin = AdminClient(conf(1, ADMIN, ADMIN_PASSWORD))
        metadata = admin.list_topics(timeout=30)
        assert {b.port for b in metadata.brokers.values()} == set(sasl_ports.values())
        # A user made through broker 1 authenticates at broker 3.
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-Secret-3"
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)
        assert "SCRAM-SHA-512" in cluster.get_json("/config/users/carol")["config"]
        changes = cluster.children("/config/changes")
        assert any(
            json.loads(cluster.zk.get(f"/config/changes/{c}")[0])["entity_path"] == "users/carol"
            for c in changes
        )
        topic = "sec-cluster"
        create_replicated_topic(cluster, topic, 3)
        values = [b"c-%d" % i for i in range(30)]
        # Three partitions: each in order, all of them in some interleaving.
        got = produce_consume(conf(3, "carol", "carol-Secret-3"), topic, values)
        assert sorted(got) == sorted(values)
        assert authentication_errors(conf(2, "carol", "wrong-Password-7"), topic)
    finally:
        cluster.close()
