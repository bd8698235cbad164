"""Shared pieces of the real-client tests: sample records, checks, a raw kio client.

Every client test produces the same kind of sample (keys drawn from a small set so
several records share a key, binary values, headers with repeated names and an
empty value, explicit timestamps) and checks what comes back with `assert_round_trip`.
"""

from __future__ import annotations

import io
import itertools
import json
import random
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from chronik.protocol.compat import build

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Base of the sample timestamps: a fixed, clearly non-"now" instant (2023-11-14).
BASE_TS = 1_700_000_000_000
POLL_TIMEOUT = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class Sent:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass
class Topic:
    name: str
    partitions: int
    records: list[Sent] = field(default_factory=list)


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sample_records(n: int = 60, seed: int = 0, binary: bool = True) -> list[Sent]:
    """`n` records over 7 keys; values are random bytes (or printable text, for
    kcat's line-oriented input), unique per record so order can be checked."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = f"key-{i % 7}".encode()
        if binary:
            # Low-entropy binary (NULs and 0xff among a few letters), so every codec
            # shrinks it: clients send a batch uncompressed when compression does not help.
            body = bytes(rnd.choice(b"\x00\xffabc") for _ in range(rnd.randrange(0, 200)))
        else:
            body = "".join(rnd.choice("abcdefghij klmnop") for _ in range(rnd.randrange(1, 80)))
            body = body.encode()
        value = f"v{i:05d}:".encode() + body
        repeated = b"\x00\xff" if binary else b"again"
        headers = (("trace", f"t-{i}".encode()), ("kind", b""), ("trace", repeated))
        out.append(Sent(key, value, headers, BASE_TS + i * 1000))
    return out


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[name].result(timeout=60)
    wait_until(
        lambda: _partition_count(admin, name) == partitions,
        f"topic {name} with {partitions} partitions in metadata",
    )


def _partition_count(admin: AdminClient, name: str) -> int:
    try:
        md = admin.list_topics(name, timeout=10)
    except KafkaException:
        return -1
    t = md.topics.get(name)
    if t is None or t.error is not None:
        return -1
    return len(t.partitions)


def wait_until(
    predicate: Callable[[], T], what: str, timeout: float = POLL_TIMEOUT, interval: float = 0.1
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def assert_round_trip(
    sent: Sequence[Sent],
    got: Iterable[Got],
    partitions: int,
    check_timestamps: bool = True,
    check_headers: bool = True,
) -> None:
    """Everything sent came back once, byte-identical, in send order per key, at
    offsets 0..n-1 of each partition, and records with one key share a partition."""
    got = list(got)
    assert len(got) == len(sent), f"sent {len(sent)} records, read back {len(got)}"
    by_partition: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        assert 0 <= g.partition < partitions
        by_partition[g.partition].append(g)
    for p, records in by_partition.items():
        offsets = sorted(r.offset for r in records)
        assert offsets == list(range(len(records))), f"partition {p} offsets {offsets}"
    partition_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    for g in got:
        partition_of_key[g.key].add(g.partition)
    for key, parts in partition_of_key.items():
        assert len(parts) == 1, f"key {key!r} spread over partitions {sorted(parts)}"

    by_value = {s.value: s for s in sent}
    assert len(by_value) == len(sent), "sample values must be unique"
    for g in got:
        s = by_value.get(g.value)
        assert s is not None, f"unexpected value {g.value!r} at {g.partition}/{g.offset}"
        assert g.key == s.key
        if check_headers:
            assert g.headers == s.headers, f"headers at {g.partition}/{g.offset}"
        if check_timestamps:
            assert g.timestamp == s.timestamp, f"timestamp at {g.partition}/{g.offset}"
    # Send order is kept within a partition (one producer, records of a key in order).
    for records in by_partition.values():
        records.sort(key=lambda r: r.offset)
        sent_order = [sent.index(by_value[r.value]) for r in records]
        assert sent_order == sorted(sent_order), "records reordered within a partition"


def normalize_headers(headers: Iterable[tuple[Any, Any]] | None) -> tuple[tuple[str, bytes], ...]:
    """Clients disagree on header shapes (None vs [], str vs bytes names)."""
    out = []
    for k, v in headers or ():
        if isinstance(k, bytes):
            k = k.decode()
        out.append((k, b"" if v is None else bytes(v)))
    return tuple(out)


# --- a raw Kafka client over a socket, with kio encoding the bodies ------------------

_SIZE = struct.Struct(">i")


class RawClient:
    """One connection, one request at a time. Enough to send exactly the bytes a
    test means (a retried batch, a sequence gap) with no client library between."""

    def __init__(self, bootstrap: str, client_id: str = "chronik-tests") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.client_id = client_id.encode()
        self._correlation = itertools.count(1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, request: Any) -> int:
        cls = type(request)
        correlation_id = next(self._correlation)
        head = (
            struct.pack(
                ">hhih", cls.__api_key__, cls.__version__, correlation_id, len(self.client_id)
            )
            + self.client_id
        )
        if cls.__flexible__:
            head += b"\x00"
        buf = io.BytesIO()
        entity_writer(cls)(buf, request)
        payload = head + buf.getvalue()
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        return correlation_id

    def receive(self, request_cls: type, correlation_id: int) -> Any:
        (size,) = _SIZE.unpack(self._read(4))
        data = self._read(size)
        (got_id,) = struct.unpack_from(">i", data, 0)
        assert got_id == correlation_id, f"correlation id {got_id}, expected {correlation_id}"
        api_key, version = request_cls.__api_key__, request_cls.__version__
        response_cls = load_response_schema(api_key, version)
        offset = 4
        # ApiVersions answers with header v0 even when flexible.
        if response_cls.__flexible__ and api_key != 18:
            offset += 1
        response, _ = entity_reader(response_cls)(data, offset)
        return response

    def request(self, request: Any) -> Any:
        return self.receive(type(request), self.send(request))

    def _read(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks += chunk
        return bytes(chunks)


def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


# --- confluent-kafka as the reference reader and producer ---------------------------


def confluent_read(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    start_offset: int | None = None,
    timeout: float = POLL_TIMEOUT,
    **config: Any,
) -> list[Got]:
    """Read `expected` records from the start of every partition (assign, no group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic_name("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **config,
        }
    )
    try:
        start = OFFSET_BEGINNING if start_offset is None else start_offset
        consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise AssertionError(f"consume error: {msg.error()}")
                got.append(confluent_got(msg))
        return got
    finally:
        consumer.close()


def confluent_got(msg: Any) -> Got:
    return Got(
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        normalize_headers(msg.headers()),
        msg.timestamp()[1],
    )


def confluent_produce(
    bootstrap: str, topic: str, records: Sequence[Sent], **config: Any
) -> list[Any]:
    """Produce and flush; returns the delivered messages (raises on any delivery error)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
    delivered: list[Any] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err is not None else delivered).append(err or msg)

    for r in records:
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            timestamp=r.timestamp,
            on_delivery=on_delivery,
        )
        producer.poll(0)
    remaining = producer.flush(POLL_TIMEOUT)
    assert remaining == 0, f"{remaining} records still undelivered"
    assert not errors, f"delivery errors: {errors[:3]}"
    return delivered


# --- what the broker stores, fetched raw ---------------------------------------------

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int = 16 << 20) -> Any:
    """A Fetch v12 for one partition from `offset`, answered at once."""
    import datetime

    from kio.schema.fetch.v12 import request as fetch

    return fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        topics=(
            fetch.FetchTopic(
                topic=topic,
                partitions=(
                    fetch.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def fetch_raw(raw: RawClient, topic: str, partition: int, offset: int = 0) -> bytes:
    """The record bytes a Fetch v12 returns for one partition from `offset`."""
    request = fetch_request(topic, partition, offset)
    response = raw.request(request)
    (data,) = response.responses[0].partitions
    assert int(data.error_code) == 0, data.error_code
    return bytes(data.records or b"")


def stored_batches(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Headers of every batch in the topic, as the broker serves them."""
    from chronik.records.batch import read_header

    headers = []
    with RawClient(bootstrap) as raw:
        for p in range(partitions):
            offset = 0
            while True:
                data = fetch_raw(raw, topic, p, offset)
                pos = 0
                seen = 0
                while pos + 61 <= len(data):
                    h = read_header(data, pos)
                    if pos + h.size > len(data):
                        break
                    headers.append(h)
                    pos += h.size
                    offset = h.base_offset + h.last_offset_delta + 1
                    seen += 1
                if not seen:
                    break
    return headers


def assert_stored_with(bootstrap: str, topic: str, partitions: int, codec: str) -> None:
    """Stored batches carry the client's codec: the broker kept its bytes. A client may
    still send a small batch uncompressed when compressing would not shrink it."""
    codecs = {h.attributes & 0x07 for h in stored_batches(bootstrap, topic, partitions)}
    assert CODEC_IDS[codec] in codecs, f"stored codecs {codecs}, produced {codec}"
    assert codecs <= {0, CODEC_IDS[codec]}, f"stored codecs {codecs}, produced {codec}"


# Requests of any API and version, built with the broker's own field mapping.
def req(api_key: int, version: int, /, **fields: object) -> object:
    return build(request_class(api_key, version), **fields)


def nested(api_key: int, version: int, cls_name: str, /, **fields: object) -> object:
    import importlib

    from kio.index import load_request_schema

    module = importlib.import_module(load_request_schema(api_key, version).__module__)
    return build(getattr(module, cls_name), **fields)


def code(value: object) -> int:
    return int(getattr(value, "value", value))


REPO = Path(__file__).resolve().parents[2]


def run_quick_bench(script: str, output: Path, timeout: float) -> tuple[dict[str, Any], str]:
    """Run ``bench/<script> --quick`` writing its JSON report to ``output``: (the report,
    what it printed). Fails with the tail of its output if it does not exit 0."""
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(output.read_text()), run.stdout
