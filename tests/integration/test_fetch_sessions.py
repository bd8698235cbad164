"""Fetch sessions (KIP-227) on a broker: raw requests for the rules and the error codes,
and real clients that fetch incrementally (kafka-python, Java kafka-clients).

chronik.broker.fetch_sessions is the cache; tests/unit/test_fetch_sessions.py its
property tests, tests/integration/test_fetch_sessions_cluster.py the followers'."""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from confluent_kafka import Producer

from chronik.protocol import errors

from .helpers import create_topic, topic_name
from .java_support import JAVA_TIMEOUT, compile_java, needs_java
from .rawclient import RawClient

ROOT = Path(__file__).resolve().parents[2]


def fetch(
    version: int,
    session_id: int,
    epoch: int,
    topic: str | UUID,
    send: dict[int, int] | None = None,
    forget: tuple[int, ...] = (),
    max_wait_ms: int = 0,
) -> Any:
    """A consumer's Fetch of partitions of one topic (by name before v13, by id from
    v13): ``send`` maps partition to fetch offset."""
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    m = load_payload_module(1, version, EntityType.request)
    key = {"topic_id": topic} if version >= 13 else {"topic": topic}
    parts = tuple(
        m.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
        for p, o in (send or {}).items()
    )
    return m.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=(m.FetchTopic(partitions=parts, **key),) if parts else (),
        forgotten_topics_data=(m.ForgottenTopic(partitions=forget, **key),) if forget else (),
    )


def answered(response: Any) -> dict[int, Any]:
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def produce(bootstrap: str, topic: str, counts: dict[int, int], tag: str = "") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(
                topic, f"{tag}{partition}-{i}".encode(), key=b"k", partition=partition
            )
    assert producer.flush(30) == 0


def test_an_idle_incremental_fetch_answers_no_partitions(broker) -> None:
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, {0: 3, 2: 5})
    with RawClient(broker.bootstrap) as raw:
        first = raw.request(fetch(12, 0, 0, topic, dict.fromkeys(range(4), 0)))
        session_id = int(first.session_id)
        assert int(first.error_code) == 0 and session_id > 0
        got = answered(first)
        assert set(got) == {0, 1, 2, 3}
        assert int(got[2].high_watermark) == 5
        # The positions the client moved to are all it sends; the session keeps the rest.
        moved = raw.request(fetch(12, session_id, 1, topic, {0: 3, 2: 5}))
        assert (int(moved.error_code), int(moved.session_id), moved.responses) == (
            0, session_id, ()
        )
        # Nothing new: waits max_wait and answers no partition at all.
        started = time.monotonic()
        idle = raw.request(fetch(12, session_id, 2, topic, max_wait_ms=300))
        assert time.monotonic() - started >= 0.25
        assert (int(idle.error_code), int(idle.session_id), idle.responses) == (0, session_id, ())
        produce(broker.bootstrap, topic, {1: 2})
        news = raw.request(fetch(12, session_id, 3, topic, max_wait_ms=5000))
        got = answered(news)
        assert set(got) == {1} and int(got[1].high_watermark) == 2 and got[1].records
    cache = broker.broker.fetch_sessions
    assert cache.incremental_fetches == 3 and cache.get(session_id) is not None


def test_sessions_by_topic_id_and_forgetting(broker) -> None:
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 3)
    topic_id = broker.broker.catalog.get(topic).topic_id
    with RawClient(broker.bootstrap) as raw:
        first = raw.request(fetch(16, 0, 0, topic_id, {0: 0, 1: 0, 2: 0}))
        session_id = int(first.session_id)
        assert session_id > 0 and set(answered(first)) == {0, 1, 2}
        assert first.responses[0].topic_id == topic_id
        # Forgetting partitions (and one the session never had) by topic id.
        assert answered(raw.request(fetch(16, session_id, 1, topic_id, forget=(0, 1, 7)))) == {}
        assert [p.partition for p in broker.broker.fetch_sessions.get(session_id)
                .partitions.values()] == [2]
        produce(broker.bootstrap, topic, {0: 1, 2: 1})
        got = answered(raw.request(fetch(16, session_id, 2, topic_id, max_wait_ms=5000)))
        assert set(got) == {2}
        # A topic id nobody knows joins the session and answers its error each time.
        stranger = UUID(int=12345)
        for epoch in (3, 4):
            got = answered(raw.request(fetch(16, session_id, epoch, stranger, {0: 0})))
            assert int(got[0].error_code) == errors.UNKNOWN_TOPIC_ID
        left = raw.request(fetch(16, session_id, 5, topic_id, forget=(2,)))
        assert int(left.session_id) == session_id
        assert [(t.topic_id, len(t.partitions)) for t in left.responses] == [(stranger, 1)]
        # Forgetting the last one closes the session.
        last = raw.request(fetch(16, session_id, 6, stranger, forget=(0,)))
        assert int(last.error_code) == 0 and int(last.session_id) == 0
        assert broker.broker.fetch_sessions.get(session_id) is None


def test_lying_session_requests_get_kafkas_error_codes(broker) -> None:
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as raw:
        for session_id, epoch in ((0, 1), (123456, 1), (-5, 3), (2**31 - 1, 2**31 - 1)):
            response = raw.request(fetch(12, session_id, epoch, topic, {0: 0}))
            assert int(response.error_code) == errors.FETCH_SESSION_ID_NOT_FOUND
            assert (int(response.session_id), response.responses) == (0, ())
        session_id = int(raw.request(fetch(12, 0, 0, topic, {0: 0, 1: 0})).session_id)
        for epoch in (2, 0x7FFFFFFF, -2):
            response = raw.request(fetch(12, session_id, epoch, topic))
            assert int(response.error_code) == errors.INVALID_FETCH_SESSION_EPOCH
        topic_id = broker.broker.catalog.get(topic).topic_id
        response = raw.request(fetch(13, session_id, 1, topic_id))
        assert int(response.error_code) == errors.FETCH_SESSION_TOPIC_ID_ERROR
        # None of that hurt the session.
        ok = raw.request(fetch(12, session_id, 1, topic, forget=(5, 6)))
        assert (int(ok.error_code), int(ok.session_id)) == (0, session_id)
        # Epoch -1 closes it and answers without one.
        final = raw.request(fetch(12, session_id, -1, topic, {0: 0}))
        assert (int(final.error_code), int(final.session_id)) == (0, 0)
        assert set(answered(final)) == {0}
        again = raw.request(fetch(12, session_id, 2, topic))
        assert int(again.error_code) == errors.FETCH_SESSION_ID_NOT_FOUND
        # Fetch v4-6 has no session fields: still served, sessionless.
        from kio.schema.fetch.v4 import request as v4

        old = raw.request(v4.FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, topics=(v4.FetchTopic(topic=topic, partitions=(
                v4.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
            )),),
        ))
        assert int(old.responses[0].partitions[0].error_code) == 0


def test_a_session_is_limited_to_max_broker_partitions(broker_factory) -> None:
    broker = broker_factory({"max.broker.partitions": "100"})
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 8)
    with RawClient(broker.bootstrap) as raw:
        # 120 partitions, most of them not existing: answered, but no session.
        response = raw.request(fetch(12, 0, 0, topic, dict.fromkeys(range(120), 0)))
        assert (int(response.error_code), int(response.session_id)) == (0, 0)
        got = answered(response)
        assert len(got) == 120
        assert int(got[119].error_code) == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert int(got[7].error_code) == 0
        session_id = int(raw.request(fetch(12, 0, 0, topic, dict.fromkeys(range(8), 0))).session_id)
        assert session_id > 0
        # Growing the session past the limit closes it: all of it answered, session id 0.
        grown = raw.request(fetch(12, session_id, 1, topic, dict.fromkeys(range(8, 110), 0)))
        assert (int(grown.error_code), int(grown.session_id), len(answered(grown))) == (0, 0, 110)
        cache = broker.broker.fetch_sessions
        assert (len(cache), cache.partitions) == (0, 0)


def test_no_sessions_when_the_cache_has_no_slots(broker_factory) -> None:
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as raw:
        response = raw.request(fetch(12, 0, 0, topic, {0: 0, 1: 0}))
        assert (int(response.error_code), int(response.session_id)) == (0, 0)
        assert set(answered(response)) == {0, 1}


def test_kafka_python_consumes_through_a_session(broker) -> None:
    """kafka-python's FetchSessionHandler (Fetch v12): every record once, in order, over
    produce rounds, most fetches incremental."""
    from kafka import KafkaConsumer, TopicPartition

    topic = topic_name("fs-kp")
    create_topic(broker.bootstrap, topic, 12)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=2048,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(12)])
    got: dict[int, list[bytes]] = {p: [] for p in range(12)}
    try:
        for round_ in range(4):
            every = range(0, 12, 1 + round_)
            produce(broker.bootstrap, topic, dict.fromkeys(every, 40), f"r{round_}-")
            deadline = time.monotonic() + 60
            want = sum(40 for r in range(round_ + 1) for _ in range(0, 12, 1 + r))
            while sum(map(len, got.values())) < want and time.monotonic() < deadline:
                for tp, records in consumer.poll(timeout_ms=200).items():
                    got[tp.partition].extend(r.value for r in records)
            assert sum(map(len, got.values())) == want
            # Idle for a while: fetches that answer nothing, and bring nothing twice.
            idle_until = time.monotonic() + 0.5
            while time.monotonic() < idle_until:
                for tp, records in consumer.poll(timeout_ms=100).items():
                    got[tp.partition].extend(r.value for r in records)
        assert len(broker.broker.fetch_sessions) == 1
    finally:
        consumer.close()
    for p, values in got.items():
        expected = [
            f"r{r}-{p}-{i}".encode() for r in range(4) if p % (1 + r) == 0 for i in range(40)
        ]
        assert values == expected, p
    assert broker.broker.fetch_sessions.incremental_fetches >= 8


_JAVA_SOURCE = ROOT / "tests" / "compat" / "java" / "ChronikClient.java"


@needs_java
def test_java_consumer_consumes_through_a_session_by_topic_id(broker, tmp_path) -> None:
    """Java kafka-clients 3.9 (Fetch v16, topics by id): records produced while it
    consumes all arrive, in order, and its fetches are incremental."""
    classpath = compile_java(tmp_path / "classes", _JAVA_SOURCE)
    topic = topic_name("fs-java")
    create_topic(broker.bootstrap, topic, 10)
    produce(broker.bootstrap, topic, dict.fromkeys(range(10), 30), "a-")
    proc = subprocess.Popen(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "ChronikClient",
         "consume", broker.bootstrap, topic, "10", "900"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    cache = broker.broker.fetch_sessions
    stop = threading.Event()
    by_id: list[bool] = []

    def later_rounds() -> None:
        # Once the consumer has a session, records arrive in rounds while it fetches.
        deadline = time.monotonic() + 60
        while cache.incremental_fetches == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        by_id.extend(s.uses_ids for s in cache.sessions())
        for round_ in range(3):
            if stop.wait(0.3):
                return
            produce(broker.bootstrap, topic, dict.fromkeys(range(round_, 10, 3), 30), f"b{round_}-")
        produce(broker.bootstrap, topic, dict.fromkeys(range(10), 30), "c-")

    producer = threading.Thread(target=later_rounds)
    producer.start()
    try:
        out, err = proc.communicate(timeout=JAVA_TIMEOUT)
    finally:
        stop.set()
        proc.kill()
        producer.join()
    assert proc.returncode == 0, err.decode()[-4000:]
    import base64

    got: dict[int, list[tuple[int, bytes]]] = {}
    for line in out.decode().splitlines():
        kind, p, offset, _ts, _key, value, _h = line.split("\t")
        assert kind == "got"
        got.setdefault(int(p), []).append((int(offset), base64.b64decode(value)))
    assert sum(map(len, got.values())) == 900
    for p, records in got.items():
        assert [o for o, _ in records] == list(range(len(records))), p
        assert len({v for _, v in records}) == len(records)
    assert cache.incremental_fetches >= 5
    assert by_id == [True]
    # Closing the consumer closed its session (a fetch at epoch -1).
    assert cache.sessions() == []


@pytest.mark.parametrize("version", [7, 12, 15])
def test_session_fetches_are_served_at_every_version(broker, version) -> None:
    topic = topic_name("fs")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, {1: 4})
    key: str | UUID = broker.broker.catalog.get(topic).topic_id if version >= 13 else topic
    with RawClient(broker.bootstrap) as raw:
        first = raw.request(fetch(version, 0, 0, key, {0: 0, 1: 0}))
        session_id = int(first.session_id)
        assert session_id > 0 and len(answered(first)) == 2
        assert answered(raw.request(fetch(version, session_id, 1, key, {1: 4}))) == {}
