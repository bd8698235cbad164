"""Bounded memory, connections and descriptors; Fetch's size limits (KIP-74)."""

from __future__ import annotations

import contextlib
import datetime
import os
import resource
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.index import load_response_schema
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.fetch.v12 import request as fetch
from kio.serial import entity_reader
from tests.conftest import BrokerProcess

from .helpers import confluent_read, create_topic, topic_name, wait_until
from .rawclient import RawClient, encode_request

MIB = 1 << 20


def _fetch_request(
    topic: str, offsets: dict[int, int], max_bytes: int, partition_max: int, wait_ms: int = 0
) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=wait_ms),
        min_bytes=1 if wait_ms else 0,
        max_bytes=max_bytes,
        topics=(
            fetch.FetchTopic(
                topic=topic,
                partitions=tuple(
                    fetch.FetchPartition(
                        partition=p, fetch_offset=o, partition_max_bytes=partition_max
                    )
                    for p, o in offsets.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def _fetch(
    raw: RawClient, topic: str, offsets: dict[int, int], max_bytes: int, partition_max: int
) -> dict[int, bytes]:
    response = raw.request(_fetch_request(topic, offsets, max_bytes, partition_max))
    out = {}
    for part in response.responses[0].partitions:
        assert int(part.error_code) == 0, part.error_code
        out[part.partition_index] = bytes(part.records or b"")
    return out


def _produce_batches(bootstrap: str, topic: str, partition: int, sizes: list[int]) -> None:
    """One record batch per value: each record is flushed before the next is sent."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "message.max.bytes": 8 * MIB,
            "compression.type": "none",
        }
    )
    for size in sizes:
        producer.produce(topic, value=os.urandom(size), partition=partition)
        assert producer.flush(30) == 0


def _api_versions_ok(raw: RawClient) -> bool:
    response = raw.request(
        api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    return int(response.error_code) == 0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


# -- Fetch sizes ---------------------------------------------------------------------


def test_two_partition_fetch_respects_max_bytes(broker) -> None:
    topic = topic_name("kip74")
    create_topic(broker.bootstrap, topic, partitions=2)
    for p in (0, 1):
        _produce_batches(broker.bootstrap, topic, p, [900_000])
    with RawClient(broker.bootstrap) as raw:
        first = _fetch(raw, topic, {0: 0, 1: 0}, 1_000_000, 20_000_000)
        served = [p for p, records in first.items() if records]
        assert len(served) == 1, {p: len(r) for p, r in first.items()}
        assert 900_000 < len(first[served[0]]) <= 1_000_000
        offsets = {0: 0, 1: 0}
        offsets[served[0]] = 1
        second = _fetch(raw, topic, offsets, 1_000_000, 20_000_000)
        other = 1 - served[0]
        assert len(second[other]) > 900_000 and second[served[0]] == b""


def test_partition_max_bytes_holds_after_the_first_partition(broker) -> None:
    topic = topic_name("kip74p")
    create_topic(broker.bootstrap, topic, partitions=2)
    for p in (0, 1):
        _produce_batches(broker.bootstrap, topic, p, [300_000])
    with RawClient(broker.bootstrap) as raw:
        got = _fetch(raw, topic, {0: 0, 1: 0}, 10_000_000, 100_000)
    # The first partition's first batch goes over partition_max_bytes; the second's may not.
    assert len(got[0]) > 300_000 and got[1] == b""


def test_confluent_consumes_large_batches_with_small_fetch_max_bytes(broker) -> None:
    topic = topic_name("fmb")
    create_topic(broker.bootstrap, topic, partitions=2)
    for p in (0, 1):
        _produce_batches(broker.bootstrap, topic, p, [900_000, 900_000])
    got = confluent_read(
        broker.bootstrap,
        topic,
        2,
        4,
        timeout=20,
        **{
            "fetch.max.bytes": 1_000_000,
            "max.partition.fetch.bytes": 20_000_000,
            "receive.message.max.bytes": 1_000_512,
        },
    )
    assert sorted((g.partition, g.offset) for g in got) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_fetch_max_bytes_caps_the_request(broker_factory) -> None:
    embedded = broker_factory({"fetch.max.bytes": "250000"})
    topic = topic_name("cap")
    create_topic(embedded.bootstrap, topic)
    _produce_batches(embedded.bootstrap, topic, 0, [100_000] * 8)
    with RawClient(embedded.bootstrap) as raw:
        got = _fetch(raw, topic, {0: 0}, 2**31 - 1, 2**31 - 1)
    assert 200_000 < len(got[0]) <= 250_000
    pool = embedded.broker.memory_pool
    wait_until(lambda: pool.available == pool.size, "every byte given back to the budget")


# -- memory ---------------------------------------------------------------------------


def test_pipelined_fetches_without_reading_keep_memory_bounded(broker_process_factory) -> None:
    proc = broker_process_factory({"offsets.topic.num.partitions": "1"})
    topic = topic_name("big")
    create_topic(proc.bootstrap, topic, **{"max.message.bytes": str(8 * MIB)})
    _produce_batches(proc.bootstrap, topic, 0, [6 * MIB] * 10)
    request = encode_request(_fetch_request(topic, {0: 0}, 50 * MIB, 50 * MIB))
    greedy = socket.create_connection(("127.0.0.1", proc.port))
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.sendall(request * 32)
    peak = 0.0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and peak < 600:
        peak = max(peak, _rss_mib(proc.proc.pid))
        time.sleep(0.05)
    assert peak < 600, f"broker RSS reached {peak:.0f} MiB"
    with RawClient(proc.bootstrap) as other:
        assert _api_versions_ok(other)
        assert len(_fetch(other, topic, {0: 0}, 10 * MIB, 10 * MIB)[0]) >= 6 * MIB
    greedy.close()


def test_request_over_socket_request_max_bytes_is_refused_before_its_body(
    broker_factory, caplog
) -> None:
    embedded = broker_factory({"socket.request.max.bytes": "1000"})
    with caplog.at_level("WARNING", logger="chronik.connection"):
        with RawClient(embedded.bootstrap) as raw:
            raw.send_bytes(struct.pack(">i", 100 * MIB))  # the prefix alone: no body comes
            assert raw.is_closed(timeout=3)
        with RawClient(embedded.bootstrap) as other:
            assert _api_versions_ok(other)
    lines = [r.getMessage() for r in caplog.records if "socket.request.max.bytes" in r.getMessage()]
    assert len(lines) == 1, lines


def _send_partially(port: int, size: int, sent: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(3)
    with contextlib.suppress(TimeoutError):  # the broker does not read it: backpressure
        sock.sendall(struct.pack(">i", size) + b"\0" * sent)
    return sock


def test_half_sent_requests_stay_within_the_memory_budget(broker_process_factory) -> None:
    proc = broker_process_factory(
        {"offsets.topic.num.partitions": "1", "queued.max.request.bytes": str(32 * MIB)}
    )
    time.sleep(0.5)
    before = _rss_mib(proc.proc.pid)
    socks: list[socket.socket] = []
    threads = [
        threading.Thread(
            target=lambda: socks.append(_send_partially(proc.port, 100 * MIB, 50 * MIB))
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.5)
    grown = _rss_mib(proc.proc.pid) - before
    # One 50 MiB half-body is read (the budget lets one request in whatever its
    # size); the other three wait in the kernel's buffers.
    assert grown < 120, f"RSS grew {grown:.0f} MiB"
    for s in socks:
        s.close()
    with RawClient(proc.bootstrap) as other:
        assert _api_versions_ok(other)


# -- idle connections ----------------------------------------------------------------


def test_idle_connection_is_closed_but_not_during_a_long_poll(broker_factory) -> None:
    embedded = broker_factory({"connections.max.idle.ms": "500"})
    topic = topic_name("idle")
    create_topic(embedded.bootstrap, topic)
    with RawClient(embedded.bootstrap) as idle, RawClient(embedded.bootstrap) as polling:
        assert _api_versions_ok(idle)
        started = time.monotonic()
        polling.send_bytes(encode_request(_fetch_request(topic, {0: 0}, MIB, MIB, 2000)))
        assert idle.is_closed(timeout=3)
        frame = polling.read_frame()
        assert frame is not None, "a connection in a long poll was closed as idle"
        assert time.monotonic() - started >= 1.9
        assert _api_versions_ok(polling)


def test_pipelined_fetches_read_slowly_get_every_byte_of_the_log(broker_factory) -> None:
    """On a plaintext connection record bytes go out with sendfile while nothing is queued
    before them, and are read and queued when the socket is full or a response is ahead:
    a slow reader of pipelined fetches must get, for each, exactly the log's bytes."""
    embedded = broker_factory()
    topic = topic_name("slow")
    create_topic(embedded.bootstrap, topic, partitions=2)
    _produce_batches(embedded.bootstrap, topic, 0, [700_000] * 3 + [300] * 40)
    _produce_batches(embedded.bootstrap, topic, 1, [200_000] * 5)
    logs = {p: embedded.broker.catalog.get(topic).partitions[p] for p in (0, 1)}
    wanted = {p: log.read(0, 8 * MIB) for p, log in logs.items()}
    assert len(wanted[0]) > 2 * MIB and len(wanted[1]) > 900_000
    slow = socket.create_connection(("127.0.0.1", embedded.port), timeout=10)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    requests = [_fetch_request(topic, {0: 0, 1: 0}, 8 * MIB, 8 * MIB) for _ in range(4)]
    slow.sendall(b"".join(encode_request(r, correlation_id=i) for i, r in enumerate(requests)))
    raw = RawClient.__new__(RawClient)
    raw.sock = slow
    try:
        for i, request in enumerate(requests):
            time.sleep(0.2)  # the broker meets a full socket and responses queued ahead
            frame = raw.read_frame()
            assert frame is not None, "broker closed the connection"
            assert struct.unpack_from(">i", frame, 0)[0] == i
            response, _ = entity_reader(load_response_schema(1, request.__version__))(frame, 5)
            got = {p.partition_index: bytes(p.records or b"")
                   for p in response.responses[0].partitions}
            assert got == wanted
    finally:
        slow.close()


def test_a_topic_deleted_under_queued_fetch_responses_cuts_the_connection_not_the_bytes(
    broker_factory, caplog
) -> None:
    """A slow reader's fetches wait behind a full socket, their records named in the
    segment files until written; deleting the topic meanwhile retires those files. Each
    response then arrives
    whole, as the log held it, or answers the topic's absence (a fetch handled after the
    deletion), or the connection is closed with a log line: never other bytes, and the
    broker goes on serving."""
    embedded = broker_factory()
    topic = topic_name("doomed")
    create_topic(embedded.bootstrap, topic)
    _produce_batches(embedded.bootstrap, topic, 0, [900_000] * 4)
    wanted = embedded.broker.catalog.get(topic).partitions[0].read(0, 8 * MIB)
    slow = socket.create_connection(("127.0.0.1", embedded.port), timeout=10)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    requests = [_fetch_request(topic, {0: 0}, 8 * MIB, 8 * MIB) for _ in range(8)]
    slow.sendall(b"".join(encode_request(r, correlation_id=i) for i, r in enumerate(requests)))
    raw = RawClient.__new__(RawClient)
    raw.sock = slow
    whole = frames = 0
    try:
        time.sleep(0.5)  # the first answered, held by the socket; the rest behind it
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap})
        admin.delete_topics([topic])[topic].result(30)
        for i, request in enumerate(requests):
            frame = raw.read_frame()
            if frame is None:
                break
            frames += 1
            assert struct.unpack_from(">i", frame, 0)[0] == i
            response, _ = entity_reader(load_response_schema(1, request.__version__))(frame, 5)
            part = response.responses[0].partitions[0]
            records = bytes(part.records or b"")
            if int(part.error_code) == 0:
                assert records == wanted
                whole += 1
            else:  # a fetch handled once the topic was gone (one at a time, in order)
                assert records == b""
    finally:
        slow.close()
    assert whole >= 1
    if frames < len(requests):
        assert "a fetch response could not be sent" in caplog.text
    with RawClient(embedded.bootstrap) as other:
        assert _api_versions_ok(other)


def test_a_client_that_stops_reading_is_closed_when_idle_and_its_memory_freed(
    broker_factory,
) -> None:
    embedded = broker_factory({"connections.max.idle.ms": "500"})
    topic = topic_name("stuck")
    create_topic(embedded.bootstrap, topic)
    _produce_batches(embedded.bootstrap, topic, 0, [900_000] * 4)
    broker = embedded.broker
    pool = broker.memory_pool
    stuck = socket.create_connection(("127.0.0.1", embedded.port))
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        stuck.sendall(encode_request(_fetch_request(topic, {0: 0}, 4 * MIB, 4 * MIB)) * 4)
        wait_until(lambda: pool.available < pool.size, "a response held for the stuck client")
        wait_until(lambda: not broker._connections, "the stuck connection closed", timeout=10)
        wait_until(lambda: pool.available == pool.size, "every byte given back to the budget")
    finally:
        stuck.close()


# -- connection limits ---------------------------------------------------------------


def test_max_connections_per_ip_closes_the_extra_connection(broker_factory) -> None:
    embedded = broker_factory({"max.connections.per.ip": "2"})
    first, second = RawClient(embedded.bootstrap), RawClient(embedded.bootstrap)
    try:
        assert _api_versions_ok(first) and _api_versions_ok(second)
        with RawClient(embedded.bootstrap) as third:
            assert third.is_closed(timeout=3)
        first.close()
        time.sleep(0.2)
        with RawClient(embedded.bootstrap) as fourth:
            assert _api_versions_ok(fourth)
    finally:
        first.close()
        second.close()


def test_max_connections_holds_new_connections_until_one_closes(broker_factory) -> None:
    embedded = broker_factory({"max.connections": "2"})
    first, second = RawClient(embedded.bootstrap), RawClient(embedded.bootstrap)
    try:
        assert _api_versions_ok(first) and _api_versions_ok(second)
        with RawClient(embedded.bootstrap) as third:
            third.send_bytes(
                encode_request(
                    api_versions.ApiVersionsRequest(
                        client_software_name="t", client_software_version="1"
                    )
                )
            )
            third.sock.settimeout(1)
            with pytest.raises(TimeoutError):
                third.sock.recv(4)
            first.close()
            third.sock.settimeout(5)
            assert third.read_frame() is not None
    finally:
        first.close()
        second.close()


# -- file descriptors ----------------------------------------------------------------


def _low_nofile(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


def test_descriptor_starved_broker_logs_briefly_and_recovers(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        {"offsets.topic.num.partitions": "1", "max.connections": "100000"},
        preexec_fn=_low_nofile(128),
    )
    broker.start()
    log_path = broker.log_path
    clients: list[RawClient] = []
    try:
        bootstrap = broker.bootstrap
        # A request type the broker has served before; a first one may need a
        # descriptor to load its schema.
        clients.append(RawClient(bootstrap, timeout=5))
        assert _api_versions_ok(clients[0])
        for _ in range(160):
            clients.append(RawClient(bootstrap, timeout=5))
        wait_until(
            lambda: "accept" in log_path.read_text(), "the accept failure logged", timeout=10
        )
        time.sleep(3)
        assert _api_versions_ok(clients[0]), "an accepted connection stopped being served"
        text = log_path.read_text()
        assert text.count("cannot accept") <= 2, text[-2000:]
        assert "Traceback" not in text, text[-2000:]
        for client in clients[:100]:
            client.close()
        with RawClient(bootstrap, timeout=5) as fresh:
            assert _api_versions_ok(fresh)
        assert _api_versions_ok(clients[-1]), "a connection from the backlog was not served"
        assert "accepting connections again" in log_path.read_text()
        assert broker.proc is not None and broker.proc.poll() is None
    finally:
        for client in clients:
            client.close()
        broker.kill()
