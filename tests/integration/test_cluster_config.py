"""Cluster settings from a server.properties file, and the errors of a broker that
cannot join: one line and a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from kazoo.client import KazooClient

from conftest import free_port, wait_for_port

from .helpers import wait_until


def serve(args: list[str], log_path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "chronik", "serve", *args], stdout=sink, stderr=sink
        )


def test_cluster_settings_from_server_properties(zookeeper, tmp_path):
    chroot = f"/props-{uuid.uuid4().hex[:8]}"
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        f"broker.id=7\nzookeeper.connect={zookeeper.connect}{chroot}\n"
        "zookeeper.session.timeout.ms=6000\nbroker.rack=r1\n"
    )
    proc = serve(["--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}",
                  "--config", str(props)], tmp_path / "broker.log")
    zk = KazooClient(hosts=zookeeper.connect + chroot)
    try:
        wait_for_port(port, proc=proc)
        zk.start()
        # The listener opens before the broker registers; a loaded machine shows the gap.
        wait_until(lambda: zk.exists("/brokers/ids/7") is not None, "broker 7 registered", 30)
        data, stat = zk.get("/brokers/ids/7")
        registered = json.loads(data)
        assert (registered["port"], registered["rack"]) == (port, "r1")
        assert stat.ephemeralOwner != 0
        meta = (tmp_path / "d" / "meta.properties").read_text()
        cluster_id = json.loads(zk.get("/cluster/id")[0])["id"]
        assert f"cluster.id={cluster_id}" in meta and "broker.id=7" in meta
    finally:
        zk.stop()
        proc.terminate()
        assert proc.wait(30) == 0
    log = (tmp_path / "broker.log").read_text()
    assert "has no effect" not in log  # zookeeper.* and broker.rack are read in a cluster


def test_a_data_dir_of_another_cluster_is_refused(zookeeper, tmp_path):
    chroot = f"/other-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start()
    try:
        zk.create(chroot + "/cluster/id", b'{"version":"1","id":"thisClusterId000000000"}',
                  makepath=True)
    finally:
        zk.stop()
    data = tmp_path / "d"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\ncluster.id=someOtherCluster00000\n")
    result = subprocess.run(
        [sys.executable, "-m", "chronik", "serve", "--data-dir", str(data), "--listen",
         f"127.0.0.1:{free_port()}", "--set", f"zookeeper.connect={zookeeper.connect}{chroot}",
         "--set", "broker.id=1"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("chronik: error: the cluster id")


def test_unreachable_zookeeper_is_one_line_and_exit_1(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "chronik", "serve", "--data-dir", str(tmp_path / "d"),
         "--listen", f"127.0.0.1:{free_port()}", "--set",
         f"zookeeper.connect=127.0.0.1:{free_port()}", "--set", "broker.id=1",
         "--set", "zookeeper.connection.timeout.ms=1500"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("chronik: error: cannot reach ZooKeeper at 127.0.0.1:")
    assert "Traceback" not in result.stderr
