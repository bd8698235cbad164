"""`chronik serve --config server.properties` takes Kafka's own config file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .cli_support import free_port, ok, unique, wait_for_port


def test_kafka_properties_file_sets_broker_defaults(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "# a trimmed copy of Kafka's config/kraft/server.properties\n"
        "process.roles=broker,controller\n"
        "node.id=1\n"
        "listeners=PLAINTEXT://:9092,\\\n"
        "    CONTROLLER://:9093\n"
        "num.network.threads=3\n"
        "log.dirs=/tmp/kraft-combined-logs\n"
        "num.partitions : 4\n"
        "log.retention.hours=168\n"
    )
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chronik",
                "serve",
                "--config",
                str(config),
                "--data-dir",
                str(tmp_path / "data"),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, proc=proc)
        bootstrap = f"127.0.0.1:{port}"
        topic = unique("defaults")
        ok("topics", "create", topic, bootstrap=bootstrap)
        described = ok("topics", "describe", topic, bootstrap=bootstrap).lines
        assert "PartitionCount: 4" in described[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    text = log.read_text(errors="replace")
    # Cluster-only settings are accepted and reported, not fatal.
    assert "num.network.threads" in text
