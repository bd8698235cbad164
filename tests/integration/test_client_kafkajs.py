"""kafkajs (a JavaScript implementation of the protocol) against a real chronik broker.

The client runs as tests/compat/kafkajs_client.js under Node; `npm install` in
tests/compat (scripts/install-test-deps.sh does it) provides kafkajs.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import (
    BASE_TS,
    Got,
    Sent,
    assert_round_trip,
    assert_stored_with,
    confluent_produce,
    confluent_read,
    sample_records,
    topic_name,
)

COMPAT = Path(__file__).resolve().parents[1] / "compat"
NODE_MODULES = ("kafkajs", "kafkajs-snappy", "lz4js", "zstd-codec")
SCRIPT = COMPAT / "kafkajs_client.js"

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not all((COMPAT / "node_modules" / m).is_dir() for m in NODE_MODULES),
        reason=f"one of {', '.join(NODE_MODULES)} missing: run `npm ci` in tests/compat "
        "(scripts/install-test-deps.sh does it)",
    ),
]

# kafkajs ships gzip; snappy comes from kafkajs-snappy, lz4 and zstd from pure-JavaScript
# libraries wired in kafkajs_client.js.
KAFKAJS_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def kafkajs(bootstrap: str, topic: str, script: Path = SCRIPT, **job) -> dict:
    """Run a kafkajs script with one JSON job on stdin; its JSON answer."""
    job = {"bootstrap": bootstrap, "topic": topic, **job}
    if "records" in job:
        job["records"] = [
            {
                "key": b64(r.key),
                "value": b64(r.value),
                "headers": [[k, b64(v)] for k, v in r.headers],
                "timestamp": str(r.timestamp),
            }
            for r in job["records"]
        ]
    proc = subprocess.run(
        ["node", str(script)],
        input=json.dumps(job).encode(),
        capture_output=True,
        timeout=180,
        cwd=COMPAT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    return json.loads(proc.stdout)


def consumed(result: dict) -> list[Got]:
    return [
        Got(
            m["partition"],
            int(m["offset"]),
            unb64(m["key"]),
            unb64(m["value"]),
            tuple((k, unb64(v)) for k, v in m["headers"]),
            int(m["timestamp"]),
        )
        for m in result["consumed"]
    ]


def assert_same_headers(sent: list[Sent], got: list[Got]) -> None:
    """kafkajs groups repeated header names (its headers are an object), so only the
    multiset of headers per record is kept."""
    by_value = {s.value: s for s in sent}
    for g in got:
        assert sorted(g.headers) == sorted(by_value[g.value].headers)


@pytest.mark.parametrize("codec", KAFKAJS_CODECS)
def test_round_trip(broker_process, codec):
    broker = broker_process
    topic = topic_name(codec)
    sent = sample_records(75, seed=41)
    result = kafkajs(broker.bootstrap, topic, partitions=3, codec=codec, acks=-1, records=sent)
    assert result["created"] is True
    got = confluent_read(broker.bootstrap, topic, 3, len(sent))
    assert_round_trip(sent, got, partitions=3, check_headers=False)
    assert_same_headers(sent, got)
    assert_stored_with(broker.bootstrap, topic, 3, codec)
    # Each send's base offset is where its first record for that partition landed.
    firsts = {(g.partition, g.offset) for g in got}
    assert all((p["partition"], int(p["baseOffset"])) in firsts for p in result["produced"])
    latest = {int(o["partition"]): int(o["high"]) for o in result["latest"]}
    counts = {p: sum(1 for g in got if g.partition == p) for p in range(3)}
    assert latest == counts


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_reads_what_another_client_wrote_through_a_group(broker, codec):
    topic = topic_name("group")
    sent = sample_records(40, seed=42)
    result = kafkajs(broker.bootstrap, topic, partitions=2)
    assert result["created"] is True
    confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": codec})
    result = kafkajs(broker.bootstrap, topic, consume=len(sent), group=topic_name("g"))
    got = consumed(result)
    assert_round_trip(sent, got, partitions=2, check_headers=False)
    assert_same_headers(sent, got)


def test_offsets_by_timestamp(broker):
    topic = topic_name("offsets")
    sent = sample_records(30, seed=43)
    kafkajs(broker.bootstrap, topic, partitions=1)
    confluent_produce(broker.bootstrap, topic, sent)
    result = kafkajs(
        broker.bootstrap, topic, queries=[BASE_TS - 1, BASE_TS + 12_000, BASE_TS + 12_500]
    )
    assert [o["high"] for o in result["latest"]] == ["30"]
    assert [o["low"] for o in result["latest"]] == ["0"]
    assert [[o["offset"] for o in q] for q in result["byTime"]] == [["0"], ["12"], ["13"]]


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_acks(broker, acks):
    topic = topic_name(f"acks{acks}".replace("-", "m"))
    sent = sample_records(50, seed=44)
    kafkajs(broker.bootstrap, topic, partitions=2, codec="none", acks=acks, records=sent)
    got = confluent_read(broker.bootstrap, topic, 2, len(sent))
    assert_round_trip(sent, got, partitions=2, check_headers=False)


def test_idempotent_producer(broker):
    topic = topic_name("idem")
    sent = sample_records(100, seed=45)
    kafkajs(
        broker.bootstrap, topic, partitions=3, codec="gzip", acks=-1, idempotent=True, records=sent
    )
    got = confluent_read(broker.bootstrap, topic, 3, len(sent))
    assert_round_trip(sent, got, partitions=3, check_headers=False)
