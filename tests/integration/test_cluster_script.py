"""`make cluster` (scripts/cluster.py): ZooKeeper and three brokers that form one
cluster, all stopped by one SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from chronik.cluster.zookeeper_process import ruok, zookeeper_classpath
from conftest import free_port

from .cluster_support import wait_until
from .helpers import create_topic, topic_name

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    zookeeper_classpath() is None, reason="ZooKeeper is not installed (make deps)"
)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def three_free_ports() -> int:
    for _ in range(50):
        base = free_port()
        if base < 65000 and all(port_free(base + i) for i in range(3)):
            return base
    raise RuntimeError("no three consecutive free ports")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_make_cluster_starts_three_brokers_and_stops_them(tmp_path):
    zk_port, base = free_port(), three_free_ports()
    out = tmp_path / "cluster.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "cluster.py"), "--dir", str(tmp_path / "c"),
             "--zookeeper-port", str(zk_port), "--base-port", str(base)],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    zk = KazooClient(hosts=f"127.0.0.1:{zk_port}", timeout=10)
    try:
        wait_until(lambda: b"The cluster is up" in out.read_bytes() or proc.poll() is not None,
                   "the script to start the cluster", timeout=90)
        assert proc.poll() is None, out.read_text()
        zk.start(timeout=15)
        wait_until(lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"],
                   "three brokers registered")
        for n in (1, 2, 3):
            assert (tmp_path / "c" / f"broker-{n}").is_dir()
        topic = topic_name("mk")
        create_topic(f"127.0.0.1:{base}", topic, 6)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{base + 2}"})
        leaders = wait_until(
            lambda: {p: m.leader for p, m in
                     admin.list_topics(topic, timeout=10).topics[topic].partitions.items()},
            f"{topic} in broker 3's metadata",
        )
        assert Counter(leaders.values()) == {1: 2, 2: 2, 3: 2}
        zk.stop()
        zk.close()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, out.read_text()
        for port in (base, base + 1, base + 2):
            assert not listening(port), port
        deadline = time.monotonic() + 10
        while ruok("127.0.0.1", zk_port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ruok("127.0.0.1", zk_port)
        # The brokers left cleanly.
        for n in (1, 2, 3):
            log = (tmp_path / "c" / f"broker-{n}.log").read_text()
            assert "chronik broker stopped" in log, log[-2000:]
    finally:
        zk.stop()
        if proc.poll() is None:
            # The script stops its brokers and ZooKeeper (own sessions) on SIGTERM only.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
