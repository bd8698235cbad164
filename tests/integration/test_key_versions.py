"""Per-key versions and conditional appends (key.versioning.enable) with real clients
against a real `chronik serve`: racing writers, every client seeing a conflict as an
error that writes nothing, idempotent retries, restarts, kill -9, retention and
compaction, with the per-key index compared against a scan of the log."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.produce.v9 import request as produce

from chronik.protocol import key_counts
from chronik.records.builder import Record, build_batch
from chronik.records.reader import iter_records
from chronik.records.versions import EXPECTED_HEADER, VERSION_HEADER, header_version
from chronik.storage.config import LogConfig
from chronik.storage.partition_log import PartitionLog
from conftest import BrokerProcess

from .helpers import RawClient, create_topic, topic_name

INVALID_RECORD = 87
VERSIONED = {"key.versioning.enable": "true"}

# One racing writer: `attempts` conditional appends on `keys`, each expecting the version
# it believes is next (one more after a conflict: counts only grow). Prints one JSON line
# per append it won.
WRITER = textwrap.dedent(
    """
    import json, random, sys
    from confluent_kafka import Producer
    bootstrap, topic, writer, attempts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    keys = sys.argv[5].split(",")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0})
    guess = {k: 0 for k in keys}
    rnd = random.Random(writer)
    for i in range(attempts):
        key = rnd.choice(keys)
        expected = guess[key]
        out = []
        p.produce(topic, key=key.encode(), value=f"{writer}:{i}".encode(),
                  headers=[("chronik-expected-version", str(expected).encode())],
                  on_delivery=lambda err, msg: out.append(err))
        p.flush(30)
        err = out[0]
        if err is None:
            guess[key] = expected + 1
            print(json.dumps([key, expected, f"{writer}:{i}"]), flush=True)
        elif err.code() == 87:
            guess[key] = expected + 1
        else:
            raise SystemExit(f"unexpected error {err}")
    """
)

# Keyed appends without expected versions until killed; prints each acknowledged offset.
FLOOD = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "linger.ms": 2,
                  "enable.idempotence": True, "message.timeout.ms": 60000})
    def done(err, msg):
        if err is None:
            print(msg.offset(), flush=True)
    i = 0
    while True:
        p.produce(sys.argv[2], key=b"k%d" % (i % 13), value=b"%d" % i, on_delivery=done)
        p.poll(0)
        i += 1
        if i % 100 == 0:
            p.flush(5)
    """
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("kv") / "data", {"log.retention.check.interval.ms": "200"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


def read_keyed(bootstrap: str, topic: str, timeout: float = 20) -> list[tuple[bytes, int, bytes]]:
    """(key, chronik-version, value) of every record of partition 0, in offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kv-check", "enable.auto.commit": False}
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, low)])
    got = []
    last = low - 1
    deadline = time.monotonic() + timeout
    while last < high - 1 and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is not None:
                continue
            last = msg.offset()
            headers = dict(msg.headers() or [])
            version = headers.get(VERSION_HEADER)
            got.append((msg.key(), int(version) if version is not None else -1, msg.value()))
    consumer.close()
    return got


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kv-end"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def confluent_append(bootstrap: str, topic: str, key: bytes, expected: int | None) -> object:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    out: list[object] = []
    headers = [] if expected is None else [(EXPECTED_HEADER, str(expected).encode())]
    producer.produce(topic, key=key, value=b"e", headers=headers,
                     on_delivery=lambda err, msg: out.append(err))
    producer.flush(30)
    return out[0]


def index_agrees_with_scan(data_dir: Path, topic: str) -> dict[bytes, int]:
    """Open the partition as the broker does (recovery included; the broker must be
    stopped) and compare its index with a scan of the log; returns the counts."""
    log = PartitionLog.open(data_dir / f"{topic}-0", LogConfig(key_versioning=True))
    try:
        rows = []
        for seg, pos, header in log.batches_from(log.start_offset):
            for rec in iter_records(seg.read(pos, header.size)):
                if rec.key is not None and rec.offset >= log.start_offset:
                    rows.append((rec.key, header_version(rec), rec.offset))
        index = log.key_index
        assert index is not None and index.end == log.end_offset
        assert index.rows() == rows
        counts = index.counts()
        for key, version, _ in rows:
            assert counts[key] >= version + 1
        return counts
    finally:
        log.close()


def test_racing_writers_win_each_version_exactly_once(broker: BrokerProcess, tmp_path: Path):
    topic = topic_name("race")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    keys = ["acct-1", "acct-2", "acct-3"]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, broker.bootstrap, topic, f"w{n}", "50", ",".join(keys)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    won: dict[tuple[str, int], list[str]] = defaultdict(list)
    for proc in writers:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        for line in out.splitlines():
            key, version, value = json.loads(line)
            won[(key, version)].append(value)
    assert all(len(v) == 1 for v in won.values()), "a version was won twice"
    assert len(won) < 6 * 50, "every writer expects version 0 first: some must lose"
    records = read_keyed(broker.bootstrap, topic)
    assert len(records) == len(won)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for key, version, value in records:
        per_key[key].append(version)
        assert won[(key.decode(), version)] == [value.decode()]
    for key, versions in per_key.items():
        assert versions == list(range(len(versions))), key
    assert len(per_key) == len(keys)


def test_a_conflict_is_an_error_that_writes_nothing_in_every_client(broker: BrokerProcess):
    topic = topic_name("conflict")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    assert confluent_append(broker.bootstrap, topic, b"k", 0) is None
    end = end_offset(broker.bootstrap, topic)

    err = confluent_append(broker.bootstrap, topic, b"k", 0)
    assert err is not None and err.code() == INVALID_RECORD and not err.retriable()

    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    with pytest.raises(Exception) as caught:
        kp.send(topic, key=b"k", value=b"e", headers=[(EXPECTED_HEADER, b"0")]).get(30)
    kp.close()
    assert "version conflict on key 'k': expected 0, actual 1" in str(caught.value)

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            with pytest.raises(Exception) as caught:
                await producer.send_and_wait(
                    topic, b"e", key=b"k", headers=[(EXPECTED_HEADER, b"0")]
                )
            # aiokafka 0.14 knows no error 87: it reports UnknownError, not retried.
            assert type(caught.value).__name__ in ("UnknownError", "InvalidRecordError")
        finally:
            await producer.stop()

    asyncio.run(aio())
    assert end_offset(broker.bootstrap, topic) == end
    assert confluent_append(broker.bootstrap, topic, b"k", 1) is None
    assert [v for _, v, _ in read_keyed(broker.bootstrap, topic)] == [0, 1]


def test_an_idempotent_retry_is_answered_with_its_offset(broker: BrokerProcess):
    from .test_idempotence import init_producer

    topic = topic_name("retry")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = init_producer(raw)
        data = build_batch(
            [Record(1, b"k", b"v", ((EXPECTED_HEADER, b"0"),))],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
        answers = []
        for _ in range(2):
            request = produce.ProduceRequest(
                acks=-1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(
                    produce.TopicProduceData(
                        name=topic,
                        partition_data=(produce.PartitionProduceData(index=0, records=data),),
                    ),
                ),
            )
            (part,) = raw.request(request).responses[0].partition_responses
            answers.append((int(part.error_code), int(part.base_offset)))
    assert answers == [(0, 0), (0, 0)]
    assert end_offset(broker.bootstrap, topic) == 1


def test_versions_survive_restart_kill_9_retention_and_compaction(
    broker: BrokerProcess, tmp_path: Path
):
    bootstrap = broker.bootstrap
    flood = topic_name("flood")
    create_topic(bootstrap, flood, **VERSIONED)
    trimmed = topic_name("trim")
    create_topic(bootstrap, trimmed, **VERSIONED, **{"segment.bytes": "1000"})
    squashed = topic_name("squash")
    create_topic(
        bootstrap,
        squashed,
        **VERSIONED,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "1000",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(60):
        producer.produce(trimmed, key=b"k%d" % (i % 3), value=b"%d" % i)
        producer.produce(squashed, key=b"k%d" % (i % 3), value=b"%d" % i)
        producer.flush(10)

    # Retention: DeleteRecords; versions keep counting.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cut = TopicPartition(trimmed, 0, 40)
    admin.delete_records([cut])[cut].result(30)
    assert confluent_append(bootstrap, trimmed, b"k0", 0) is not None
    assert confluent_append(bootstrap, trimmed, b"k0", 20) is None
    kept = read_keyed(bootstrap, trimmed)
    assert [v for k, v, _ in kept if k == b"k0"] == list(range(14, 21))

    # Compaction: the cleaner keeps each key's last record, with its version.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        squashed_records = read_keyed(bootstrap, squashed)
        if len(squashed_records) < 30:
            break
        time.sleep(0.3)
    assert len(squashed_records) < 30, "the cleaner did not compact"
    for key in (b"k0", b"k1", b"k2"):
        versions = [v for k, v, _ in squashed_records if k == key]
        assert versions == sorted(versions) and versions[-1] == 19
    assert confluent_append(bootstrap, squashed, b"k1", 20) is None

    # kill -9 in the middle of keyed appends.
    out = tmp_path / "acked.txt"
    with open(out, "w") as sink:
        writer = subprocess.Popen([sys.executable, "-c", FLOOD, bootstrap, flood], stdout=sink)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and out.stat().st_size < 20_000:
            time.sleep(0.2)
        broker.kill()
        writer.kill()
        writer.wait()
    acked = [int(line) for line in out.read_text().split()]
    assert len(acked) > 1000
    index_agrees_with_scan(broker.data_dir, flood)
    assert index_agrees_with_scan(broker.data_dir, trimmed) == {b"k0": 21, b"k1": 20, b"k2": 20}
    assert index_agrees_with_scan(broker.data_dir, squashed) == {b"k0": 20, b"k1": 21, b"k2": 20}
    broker.start()
    records = read_keyed(broker.bootstrap, flood)
    assert len(records) >= max(acked) + 1
    seen: dict[bytes, int] = {}
    for key, version, _ in records:
        assert version == seen.get(key, 0)
        seen[key] = version + 1
    # After the restart the next version of each key is where the log says.
    assert confluent_append(broker.bootstrap, flood, b"k3", seen[b"k3"] - 1) is not None
    assert confluent_append(broker.bootstrap, flood, b"k3", seen[b"k3"]) is None
    assert confluent_append(broker.bootstrap, squashed, b"k1", 21) is None
    # A clean restart keeps the same.
    assert broker.terminate() == 0
    index_agrees_with_scan(broker.data_dir, flood)
    broker.start()
    assert confluent_append(broker.bootstrap, flood, b"k3", seen[b"k3"] + 1) is None


# --- kafkajs and Java kafka-clients ---------------------------------------------------------

# Each client runs the same script: k's first append (expected 0), a conflict (expected 0
# again), one batch of two records whose second expectation is wrong (all or nothing: the
# first, correct, is not written either), a batch of two correct expectations, and a record
# without the header. The log then holds k at versions 0, 1, 2 and j at 0.
CLIENT_SENDS = [
    [("k", "v0", 0)],
    [("k", "conflict", 0)],
    [("k", "half-1", 1), ("k", "half-2", 5)],
    [("k", "v1", 1), ("k", "v2", 2)],
    [("j", "free", None)],
]


def assert_client_outcome(broker: BrokerProcess, topic: str) -> None:
    records = read_keyed(broker.bootstrap, topic)
    assert [(k, v, val) for k, v, val in records] == [
        (b"k", 0, b"v0"), (b"k", 1, b"v1"), (b"k", 2, b"v2"), (b"j", 0, b"free"),
    ]


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kafkajs_sees_a_conflict_as_an_error_that_writes_nothing(
    broker: BrokerProcess, idempotent: bool
):
    from .test_client_kafkajs import COMPAT
    from .test_client_kafkajs import pytestmark as needs_node

    for mark in needs_node:
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    topic = topic_name("jskv")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    job = {
        "bootstrap": broker.bootstrap,
        "topic": topic,
        "idempotent": idempotent,
        "sends": [
            [{"key": k, "value": v, "expected": e} for k, v, e in send] for send in CLIENT_SENDS
        ],
    }
    proc = subprocess.run(
        ["node", str(COMPAT / "kafkajs_versions.js")],
        input=json.dumps(job).encode(), capture_output=True, timeout=120, cwd=COMPAT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    results = json.loads(proc.stdout)
    assert [("ok" in r) for r in results] == [True, False, False, True, True]
    assert [int(o["baseOffset"]) for o in results[0]["ok"]] == [0]
    assert [int(o["baseOffset"]) for o in results[3]["ok"]] == [1]
    for failed in (results[1], results[2]):
        # kafkajs (Produce v7 at most) reports code 87 by its own name and text, not
        # retried: KafkaJSProtocolError INVALID_RECORD "This record has failed the
        # validation on broker and hence be rejected".
        error = failed["error"]
        assert error["causeName"] == "KafkaJSProtocolError", error
        assert (error["type"], error["code"], error["retriable"]) == ("INVALID_RECORD", 87, False)
    assert_client_outcome(broker, topic)


JAVA_SOURCE = Path(__file__).resolve().parents[1] / "compat" / "java" / "KeyVersions.java"


@pytest.fixture(scope="module")
def key_versions_java(tmp_path_factory: pytest.TempPathFactory) -> str:
    from .java_support import NEEDS_JAVA, compile_java

    for mark in NEEDS_JAVA:
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    return compile_java(tmp_path_factory.mktemp("kv-java"), JAVA_SOURCE)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_java_client_sees_a_conflict_as_an_error_that_writes_nothing(
    broker: BrokerProcess, key_versions_java: str, idempotent: bool
):
    from .java_support import JAVA_TIMEOUT

    topic = topic_name("javakv")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    lines = "".join(
        "".join(f"{k}\t{v}\t{'' if e is None else e}\n" for k, v, e in send) + "\n"
        for send in CLIENT_SENDS
    )
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", key_versions_java,
         "KeyVersions", broker.bootstrap, topic, f"enable.idempotence={str(idempotent).lower()}"],
        input=lines.encode(), capture_output=True, timeout=JAVA_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    out = [line.split("\t") for line in proc.stdout.decode().splitlines()]
    assert [o[0] for o in out] == ["ok", "error", "error", "error", "ok", "ok", "ok"], out
    assert [int(o[2]) for o in out if o[0] == "ok"] == [0, 1, 2, 3]
    # Produce v11 carries record_errors: the record that failed gets the broker's message,
    # the other record of its batch Kafka's own KafkaException "Failed to append record
    # because it was part of a batch which had one more more invalid records".
    conflict, half_ok, half_bad = out[1], out[2], out[3]
    invalid = "org.apache.kafka.common.InvalidRecordException"
    assert conflict[1] == invalid
    assert "version conflict on key 'k': expected 0, actual 1" in conflict[2]
    assert half_bad[1] == invalid
    assert "version conflict on key 'k': expected 5, actual 2" in half_bad[2], half_bad
    assert half_ok[1] == "org.apache.kafka.common.KafkaException", half_ok
    assert "part of a batch which had one more more invalid records" in half_ok[2]
    assert_client_outcome(broker, topic)


def _key_counts_exchange(port: int, body: bytes) -> bytes | None:
    """One KeyCounts request on a new connection: the response body, or None if the
    broker closed the connection."""
    client_id = b"key-counts-test"
    frame = struct.pack(">hhih", key_counts.API_KEY, 0, 7, len(client_id)) + client_id + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        (size,) = struct.unpack(">i", head)
        answer = s.recv(size, socket.MSG_WAITALL)
    assert struct.unpack_from(">i", answer)[0] == 7
    return answer[4:]


def test_key_counts_answers_a_peer_and_refuses_junk(broker: BrokerProcess):
    """chronik's own inter-broker KeyCounts, sent as a hostile client would: a well-formed
    one is answered (counts of keys whose records are all below the offset); unknown
    topics get an error code; malformed bodies close the connection with a log line, and
    the broker serves on, its log intact."""
    topic = topic_name("kc")
    create_topic(broker.bootstrap, topic, **VERSIONED)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key in (b"x", b"x", b"y", b"z"):
        producer.produce(topic, key=key, value=b"v")
    producer.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cut = TopicPartition(topic, 0, 3)
    admin.delete_records([cut])[cut].result(30)

    ask = key_counts.Request(topic, 0, 3, None, 1)
    code, counts, more = key_counts.decode_response(
        _key_counts_exchange(broker.port, key_counts.encode_request(ask)))
    assert (code, counts, more) == (0, [(b"x", 2)], True)
    ask = key_counts.Request(topic, 0, 3, b"x", 10)
    answer = _key_counts_exchange(broker.port, key_counts.encode_request(ask))
    assert key_counts.decode_response(answer) == (0, [(b"y", 1)], False)
    ask = key_counts.Request("no-such-topic", 0, 3, None, 10)
    code, counts, _ = key_counts.decode_response(
        _key_counts_exchange(broker.port, key_counts.encode_request(ask)))
    assert code == 3 and counts == []  # UNKNOWN_TOPIC_OR_PARTITION

    good = key_counts.encode_request(key_counts.Request(topic, 0, 3, None, 10))
    for junk in (b"", b"\x00", good[:-1], good + b"\x00", b"\x7f\xff" + good[2:],
                 good[:-8] + b"\xff\xff\xff\xfe" + good[-4:]):
        assert _key_counts_exchange(broker.port, junk) is None, junk
    assert "KeyCounts" in broker.log_text()
    assert end_offset(broker.bootstrap, topic) == 4
    assert confluent_append(broker.bootstrap, topic, b"x", 2) is None
