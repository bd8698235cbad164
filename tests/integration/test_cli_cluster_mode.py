"""`chronik cluster describe` and `chronik topics describe` against three brokers and a
ZooKeeper, before and after one broker is killed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.conftest import BrokerProcess, free_port

from .cli_support import ok, unique
from .test_cli_cluster import parse_describe

zookeeper_process = pytest.importorskip("chronik.cluster.zookeeper_process")


@pytest.fixture
def three_brokers(tmp_path: Path):
    try:
        zk = zookeeper_process.ZooKeeperProcess(tmp_path / "zk", free_port()).start()
    except zookeeper_process.ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    brokers: list[BrokerProcess] = []
    try:
        chroot = f"{zk.connect}/{unique('cli')}"
        for node_id in (1, 2, 3):
            config = {
                "zookeeper.connect": chroot,
                "broker.id": str(node_id),
                "zookeeper.session.timeout.ms": "2000",
            }
            brokers.append(BrokerProcess(tmp_path / f"broker-{node_id}", config).start())
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()
        zk.stop()


def describe_until(bootstrap: str, done, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        header, brokers, offline = parse_describe(
            ok("cluster", "describe", bootstrap=bootstrap).lines
        )
        if done(header, brokers) or time.monotonic() > deadline:
            return header, brokers, offline
        time.sleep(0.3)


def test_cluster_describe_shows_every_broker_and_the_offline_partitions(three_brokers) -> None:
    first, second, third = three_brokers
    b = second.bootstrap
    topic = unique("spread")
    ok("topics", "create", topic, "--partitions", "6", bootstrap=b)
    header, brokers, offline = describe_until(
        b, lambda h, rows: len(rows) == 3 and h["Controller"] != "none"
    )
    assert [r["BROKER"] for r in brokers] == ["1", "2", "3"]
    assert [r["PORT"] for r in brokers] == [str(x.port) for x in three_brokers]
    assert [r["CONTROLLER"] for r in brokers].count("yes") == 1
    assert brokers[int(header["Controller"]) - 1]["CONTROLLER"] == "yes"
    assert header["OfflinePartitions"] == "0" and offline == []
    assert sum(int(r["LEADER-PARTITIONS"]) for r in brokers) == int(header["Partitions"])

    described = ok("topics", "describe", topic, bootstrap=b).lines[1:]
    fields = [dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in described]
    # Round-robin from a random start: each of the three brokers leads two partitions.
    assert sorted(f["Leader"] for f in fields) == ["1", "1", "2", "2", "3", "3"]
    assert all(f["Replicas"] == f["Leader"] == f["Isr"] for f in fields)
    on_third = sorted(int(f["Partition"]) for f in fields if f["Leader"] == "3")

    third.kill()
    header, brokers, offline = describe_until(
        b, lambda h, rows: len(rows) == 2 and int(h["OfflinePartitions"]) >= 2
    )
    assert [r["BROKER"] for r in brokers] == ["1", "2"]
    mine = [row for row in offline if row[0] == topic]
    assert mine == [[topic, str(p), "3"] for p in on_third]

    unavailable = ok("topics", "describe", topic, "--unavailable-partitions", bootstrap=b).lines
    assert [line.split("\t")[2:4] for line in unavailable] == [
        [f"Partition: {p}", "Leader: none"] for p in on_third
    ]
