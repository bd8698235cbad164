"""kcat (Debian's: librdkafka 2.0.2, an older and stricter parser) against chronik."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

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
    create_topic,
    sample_records,
    topic_name,
)

pytestmark = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)"
)

# kcat sets the same headers on every record it produces.
HEADERS = (("trace", b"a=b"), ("kind", b""))
KCAT_TIMEOUT = 120


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        ["kcat", "-b", bootstrap, "-m", "30", *args],
        input=stdin,
        capture_output=True,
        timeout=KCAT_TIMEOUT,
    )
    assert proc.returncode == 0, f"kcat {' '.join(args)} failed: {proc.stderr.decode()[-3000:]}"
    return proc.stdout.decode()


def kcat_produce(bootstrap: str, topic: str, records: list[Sent], *config: str) -> None:
    lines = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
    headers = [arg for k, v in HEADERS for arg in ("-H", f"{k}={v.decode()}")]
    settings = [arg for c in config for arg in ("-X", c)]
    kcat(bootstrap, "-P", "-t", topic, "-K", "\t", *headers, *settings, stdin=lines)


def kcat_consume(bootstrap: str, topic: str, *args: str) -> list[Got]:
    out = kcat(bootstrap, "-C", "-t", topic, "-e", "-J", *args)
    got = []
    for line in out.splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2))
        key = None if m["key"] is None else m["key"].encode()
        value = None if m["payload"] is None else m["payload"].encode()
        got.append(Got(m["partition"], m["offset"], key, value, headers, m["ts"]))
    return got


def text_records(n: int, seed: int) -> list[Sent]:
    return sample_records(n, seed=seed, binary=False)


# Older librdkafka (kcat's 2.0.2) compresses gzip, snappy and lz4 only if the broker's
# advertised Produce range reaches down to v0 (rdkafka_msgset_writer.c); otherwise it
# sends those batches uncompressed. `assert_stored_with` catches that.
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(broker_process, codec):
    broker = broker_process  # a real `chronik serve` process
    topic = topic_name(codec)
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = text_records(60, seed=31)
    before = int(time.time() * 1000)
    # librdkafka sends a batch uncompressed when compressing does not shrink it, which a
    # batch of one or two short records does not: linger so that the records batch up even
    # when kcat is slow to read its input on a loaded machine.
    kcat_produce(
        broker.bootstrap, topic, sent, f"compression.codec={codec}", "acks=all", "linger.ms=500"
    )
    after = int(time.time() * 1000)
    got = kcat_consume(broker.bootstrap, topic, "-o", "beginning")
    assert_round_trip(sent, got, partitions=3, check_timestamps=False, check_headers=False)
    assert {g.headers for g in got} == {HEADERS}
    # kcat stamps records with the time it produced them (CreateTime).
    assert all(before - 1000 <= g.timestamp <= after + 1000 for g in got)
    assert_stored_with(broker.bootstrap, topic, 3, codec)


def test_reads_keys_headers_timestamps_another_client_wrote(broker):
    topic = topic_name("mixed")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = text_records(50, seed=32)
    confluent_produce(broker.bootstrap, topic, sent, **{"compression.type": "lz4"})
    got = kcat_consume(broker.bootstrap, topic, "-o", "beginning")
    assert_round_trip(sent, got, partitions=2)


def test_offsets_relative_and_by_timestamp(broker):
    topic = topic_name("seek")
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = text_records(30, seed=33)
    confluent_produce(broker.bootstrap, topic, sent, **{"batch.num.messages": 4})

    def offsets(*args: str) -> list[int]:
        return [g.offset for g in kcat_consume(broker.bootstrap, topic, "-p", "0", *args)]

    assert offsets("-o", "10", "-c", "5") == [10, 11, 12, 13, 14]
    assert offsets("-o", "-3") == [27, 28, 29]
    assert offsets("-o", "end") == []
    assert offsets("-o", f"s@{BASE_TS + 26_000}") == [26, 27, 28, 29]
    assert offsets("-o", f"s@{BASE_TS + 21_500}") == list(range(22, 30))
    assert offsets("-o", "beginning", "-o", f"e@{BASE_TS + 3_000}") == [0, 1, 2]


def test_query_offsets_for_times(broker):
    topic = topic_name("query")
    create_topic(broker.bootstrap, topic, partitions=1)
    confluent_produce(broker.bootstrap, topic, text_records(20, seed=34))
    out = kcat(
        broker.bootstrap,
        "-Q",
        "-t",
        f"{topic}:0:{BASE_TS + 7_000}",
    )
    assert out.split() == [topic, "[0]", "offset", "7"]
    out = kcat(broker.bootstrap, "-Q", "-t", f"{topic}:0:{BASE_TS + 50_000}")
    assert out.split()[-1] == "-1"


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, acks):
    topic = topic_name(f"acks{acks}")
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = text_records(40, seed=35)
    kcat_produce(broker.bootstrap, topic, sent, f"acks={acks}")
    got = confluent_read(broker.bootstrap, topic, 2, len(sent))
    assert_round_trip(sent, got, partitions=2, check_timestamps=False, check_headers=False)


def test_idempotent_producer(broker):
    topic = topic_name("idem")
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = text_records(150, seed=36)
    kcat_produce(broker.bootstrap, topic, sent, "enable.idempotence=true", "batch.num.messages=10")
    got = kcat_consume(broker.bootstrap, topic, "-o", "beginning")
    assert_round_trip(sent, got, partitions=3, check_timestamps=False, check_headers=False)


def test_metadata_lists_topic_and_broker(broker):
    topic = topic_name("meta")
    create_topic(broker.bootstrap, topic, partitions=4)
    md = json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic))
    assert [b["name"] for b in md["brokers"]] == [broker.bootstrap]
    (t,) = md["topics"]
    assert t["topic"] == topic
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2, 3]
    assert {p["leader"] for p in t["partitions"]} == {md["brokers"][0]["id"]}


def test_produce_to_a_new_topic_creates_it(broker_factory):
    broker = broker_factory({"num.partitions": "3", "auto.create.topics.enable": "true"})
    topic = topic_name("auto")
    sent = text_records(30, seed=37)
    kcat_produce(broker.bootstrap, topic, sent)
    md = json.loads(kcat(broker.bootstrap, "-L", "-J", "-t", topic))
    assert len(md["topics"][0]["partitions"]) == 3
    got = kcat_consume(broker.bootstrap, topic, "-o", "beginning")
    assert_round_trip(sent, got, partitions=3, check_timestamps=False, check_headers=False)
