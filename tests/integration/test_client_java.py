"""Java kafka-clients 3.9 (what Spark's Kafka connector uses) against chronik.

tests/compat/java/ChronikClient.java is compiled once per session with javac. The jars
(kafka-clients, slf4j-api and the lz4/snappy/zstd codecs) are looked up in
$CHRONIK_KAFKA_JARS, else .cache/kafka-java; scripts/install-test-deps.sh puts them there.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from .helpers import (
    BASE_TS,
    CODECS,
    Got,
    Sent,
    assert_round_trip,
    assert_stored_with,
    confluent_produce,
    confluent_read,
    sample_records,
    topic_name,
)
from .java_support import JAVA_TIMEOUT, NEEDS_JAVA, compile_java

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "compat" / "java" / "ChronikClient.java"
pytestmark = NEEDS_JAVA


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory) -> str:
    return compile_java(tmp_path_factory.mktemp("java-classes"), SOURCE)


def java(classpath: str, *args: str, stdin: bytes | None = None) -> list[list[str]]:
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "ChronikClient", *args],
        input=stdin,
        capture_output=True,
        timeout=JAVA_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    return [line.split("\t") for line in proc.stdout.decode().splitlines()]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def produce(classpath: str, bootstrap: str, topic: str, partitions: int, records, *props: str):
    lines = "".join(
        f"{r.timestamp}\t{b64(r.key)}\t{b64(r.value)}\t"
        + ",".join(f"{k}:{b64(v)}" for k, v in r.headers)
        + "\n"
        for r in records
    )
    out = java(
        classpath, "produce", bootstrap, topic, str(partitions), *props, stdin=lines.encode()
    )
    return [(int(p), int(o)) for kind, p, o in out if kind == "sent"]


def consume(classpath: str, bootstrap: str, topic: str, partitions: int, count: int, *offset):
    got = []
    for fields in java(
        classpath, "consume", bootstrap, topic, str(partitions), str(count), *map(str, offset)
    ):
        _, p, o, ts, key, value, headers = fields
        hs = tuple(
            (h.split(":", 1)[0], base64.b64decode(h.split(":", 1)[1]))
            for h in headers.split(",")
            if h
        )
        got.append(Got(int(p), int(o), base64.b64decode(key), base64.b64decode(value), hs, int(ts)))
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker_process, java_classpath, codec):
    """Java's default producer is idempotent with acks=all: it cannot write at all
    without InitProducerId and sequence checks."""
    broker = broker_process
    topic = topic_name(codec)
    sent = sample_records(90, seed=51)
    offsets = produce(java_classpath, broker.bootstrap, topic, 3, sent, f"compression.type={codec}")
    got = consume(java_classpath, broker.bootstrap, topic, 3, len(sent))
    assert_round_trip(sent, got, partitions=3)
    assert set(offsets) == {(g.partition, g.offset) for g in got}
    assert_stored_with(broker.bootstrap, topic, 3, codec)
    assert sorted(confluent_read(broker.bootstrap, topic, 3, len(sent)), key=_pos) == sorted(
        got, key=_pos
    )


def _pos(g: Got) -> tuple[int, int]:
    return (g.partition, g.offset)


def test_seek_and_offsets(broker, java_classpath):
    topic = topic_name("offsets")
    sent: list[Sent] = sample_records(30, seed=52)
    produce(java_classpath, broker.bootstrap, topic, 1, [], "acks=all")
    confluent_produce(broker.bootstrap, topic, sent, **{"batch.num.messages": 6})
    got = consume(java_classpath, broker.bootstrap, topic, 1, 5, 12)
    assert [g.offset for g in got[:5]] == [12, 13, 14, 15, 16]
    assert [g.value for g in got[:5]] == [s.value for s in sent[12:17]]
    out = java(
        java_classpath,
        "offsets",
        broker.bootstrap,
        topic,
        str(BASE_TS - 1),
        str(BASE_TS + 20_000),
        str(BASE_TS + 20_001),
        str(BASE_TS + 60_000),
    )
    rows = {tuple(r[:-1]): int(r[-1]) for r in out}
    assert rows[("earliest", "0")] == 0
    assert rows[("latest", "0")] == 30
    assert rows[("time", str(BASE_TS - 1), "0")] == 0
    assert rows[("time", str(BASE_TS + 20_000), "0")] == 20
    assert rows[("time", str(BASE_TS + 20_001), "0")] == 21
    assert rows[("time", str(BASE_TS + 60_000), "0")] == -1


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, java_classpath, acks):
    topic = topic_name(f"acks{acks}")
    sent = sample_records(40, seed=53)
    idempotent = "true" if acks == "all" else "false"
    offsets = produce(
        java_classpath,
        broker.bootstrap,
        topic,
        2,
        sent,
        f"acks={acks}",
        f"enable.idempotence={idempotent}",
    )
    got = confluent_read(broker.bootstrap, topic, 2, len(sent))
    assert_round_trip(sent, got, partitions=2)
    if acks != "0":
        assert set(offsets) == {(g.partition, g.offset) for g in got}
