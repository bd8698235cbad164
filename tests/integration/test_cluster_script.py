"""`make cluster` (scripts/cluster.py): ZooKeeper and three brokers that form one
cluster; a killed broker is reported while the others keep serving; `scripts/cluster.py
start|stop|kill N` from another terminal restarts it, adds a fourth broker and stops it;
one SIGINT (Ctrl-C) stops them all, then ZooKeeper."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from chronik.cluster.zookeeper_process import ruok, zookeeper_classpath
from conftest import free_port

from .cluster_support import wait_until
from .helpers import topic_name
from .ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cluster.py"
RECORDS = 60

pytestmark = pytest.mark.skipif(
    zookeeper_classpath() is None, reason="ZooKeeper is not installed (make deps)"
)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    return {p: m.leader for p, m in admin.list_topics(topic, timeout=10).topics[topic]
            .partitions.items()}


def produce_and_consume(bootstrap: str, topic: str) -> None:
    """Write RECORDS records with acks=all and read every one back, through `bootstrap`."""
    delivered: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 60000})
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i % 7}", value=f"v{i}",
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(90) == 0
    assert delivered == [None] * RECORDS, delivered
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[str] = set()
    deadline = time.monotonic() + 90
    try:
        while len(seen) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value().decode())
    finally:
        consumer.close()
    assert seen == {f"v{i}" for i in range(RECORDS)}


def test_make_cluster_survives_a_killed_broker_restarts_it_and_grows(tmp_path):
    zk_port, base = free_port(), free_ports(4)
    folder = tmp_path / "c"
    out = tmp_path / "cluster.out"

    def control(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args, "--dir", str(folder)],
            capture_output=True, text=True, timeout=180,
        )

    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--dir", str(folder),
             "--zookeeper-port", str(zk_port), "--base-port", str(base)],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    zk = KazooClient(hosts=f"127.0.0.1:{zk_port}", timeout=10)
    try:
        wait_until(lambda: b"Ctrl-C stops" in out.read_bytes() or proc.poll() is not None,
                   "the script to start the cluster", timeout=90)
        assert proc.poll() is None, out.read_text()
        greeting = out.read_text()
        all3 = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        for expected in (
            f"Bootstrap servers: {all3}",
            f"cluster describe --bootstrap-server {all3}",
            "scripts/cluster.py kill 3", "scripts/cluster.py start 3",
            f"scripts/cluster.py start 4 --dir {folder}",
            f"a new broker 4 on 127.0.0.1:{base + 3}",
            f"cluster rebalance --bootstrap-server {all3} [--dry-run]",
            f"cluster decommission 3 --bootstrap-server {all3}",
        ):
            assert expected in greeting, greeting
        zk.start(timeout=15)
        wait_until(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"],
                   "three brokers registered")
        for n in (1, 2, 3):
            assert (folder / f"broker-{n}").is_dir()

        topic = topic_name("mk")
        admin = AdminClient({"bootstrap.servers": all3})
        admin.create_topics([NewTopic(topic, 6, 3, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[topic].result(60)
        first = wait_until(lambda: leaders(admin, topic), f"{topic} in the metadata")
        assert Counter(first.values()) == {1: 2, 2: 2, 3: 2}

        # kill -9 broker 2, as a user would, by the pid the script wrote.
        pid = int((folder / "broker-2.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        died = wait_until(
            lambda: re.search(r"^broker 2 died \(killed by SIGKILL\).*$",
                              out.read_text(), re.MULTILINE),
            "the script to report broker 2's death",
        ).group(0)
        assert str(folder / "broker-2.log") in died and "cluster.py start 2" in died, died
        assert proc.poll() is None, out.read_text()
        assert listening(base) and listening(base + 2)
        assert not (folder / "broker-2.pid").exists()

        # The others take over broker 2's partitions and serve a real client.
        survivors = f"127.0.0.1:{base},127.0.0.1:{base + 2}"
        admin = AdminClient({"bootstrap.servers": survivors})
        wait_until(lambda: (ls := leaders(admin, topic)) and all(
            leader in (1, 3) for leader in ls.values()), "broker 2's partitions to fail over")
        produce_and_consume(survivors, topic)

        # Started again with the command: same port and data dir, back in every ISR.
        started = control("start", "2")
        assert started.returncode == 0, started.stderr
        assert f"broker 2 on 127.0.0.1:{base + 1}" in started.stdout
        assert str(folder / "broker-2") in started.stdout
        wait_until(lambda: "2" in zk.get_children("/brokers/ids"), "broker 2 registered again")
        wait_until(
            lambda: all(sorted(m.isrs) == [1, 2, 3] for m in admin.list_topics(
                topic, timeout=10).topics[topic].partitions.values()),
            "broker 2 back in every ISR",
        )

        # A fourth broker joins: its own port and data dir, in ZooKeeper and Metadata.
        grown = control("start", "4")
        assert grown.returncode == 0, grown.stderr
        assert f"broker 4 on 127.0.0.1:{base + 3}" in grown.stdout
        wait_until(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3", "4"],
                   "broker 4 registered")
        four = AdminClient({"bootstrap.servers": f"127.0.0.1:{base + 3}"})
        brokers = wait_until(
            lambda: (md := four.list_topics(timeout=10)) and len(md.brokers) == 4 and md.brokers,
            "four brokers in broker 4's metadata",
        )
        assert brokers[4].port == base + 3
        assert (folder / "broker-4").is_dir()

        stopped = control("stop", "4")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.startswith("broker 4 stopped (exit code 0)"), stopped.stdout
        wait_until(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"],
                   "broker 4 deregistered")
        again = control("kill", "4")
        assert again.returncode == 1 and "broker 4 is not running" in again.stderr
        status = control("status")
        assert status.returncode == 0, status.stderr
        assert f"broker 4 on 127.0.0.1:{base + 3}: not running" in status.stdout
        assert f"broker 2 on 127.0.0.1:{base + 1}: up" in status.stdout
        zk.stop()
        zk.close()

        # Ctrl-C: the brokers leave cleanly, then ZooKeeper stops.
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, out.read_text()
        for port in (base, base + 1, base + 2, base + 3):
            assert not listening(port), port
        deadline = time.monotonic() + 10
        while ruok("127.0.0.1", zk_port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ruok("127.0.0.1", zk_port)
        # Each broker stopped cleanly once: broker 2's first run was killed, its second
        # stopped by Ctrl-C; broker 4 by `stop 4`.
        for n in (1, 2, 3, 4):
            log = (folder / f"broker-{n}.log").read_text()
            assert log.count("chronik broker stopped") == 1, log[-2000:]
        assert not list(folder.glob("*.pid")), list(folder.glob("*.pid"))
        gone = control("status")
        assert gone.returncode == 1 and "no `make cluster` is running" in gone.stderr
    finally:
        zk.stop()
        if proc.poll() is None:
            # The script stops its brokers and ZooKeeper (own sessions) on a signal only.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
