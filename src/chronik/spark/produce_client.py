# A blocking Kafka producer of ready-made record batches, for the Spark sink's fast path.
#
# Wire format: Kafka's framing (int32 size; request header v1, or v2 for flexible versions:
# int16 api_key, int16 api_version, int32 correlation_id, string client_id, [tagged fields];
# responses int32 size, int32 correlation_id, [tagged fields when flexible], body) around
# bodies kio encodes from Kafka's message schemas, at these versions (Kafka 2.7 and later,
# and chronik, serve them; ApiVersions v0 is asked first, and a broker without one of them
# leaves the writing to librdkafka):
#   Metadata v8, Produce v8, FindCoordinator v3, InitProducerId v3, AddPartitionsToTxn v3,
#   EndTxn v3.
#
# Kafka's producer semantics, as the Java client and librdkafka keep them: each Produce
# request holds at most one batch per partition, up to MAX_IN_FLIGHT requests in flight on
# a connection (answered in order); an idempotent producer numbers each partition's batches
# (base sequence) and, after a retriable error or a broken connection, sends every batch not
# yet acknowledged again in order with its numbers, so the broker keeps each exactly once
# (DUPLICATE_SEQUENCE_NUMBER is an acknowledgement). A transactional producer finds its
# coordinator, takes its id and epoch from InitProducerId (fencing earlier producers of the
# id), adds each partition with AddPartitionsToTxn before its first batch, and ends with
# EndTxn. Errors that are not retriable fail the write with Kafka's error name. A Produce
# answer's throttle time (a produce quota) holds the next request back that long.
from __future__ import annotations

import datetime
import functools
import importlib
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as E

from chronik.protocol.compat import decode, encode
from chronik.spark import fetch_auth
from chronik.spark.fetch_client import read_exactly

API_VERSIONS = 18
VERSIONS = {0: 8, 3: 8, 10: 3, 22: 3, 24: 3, 26: 3}  # api key -> the version used
MAX_IN_FLIGHT = 5  # Kafka's bound for an idempotent producer: the broker remembers 5 batches
_HEADER = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
TopicPartition = tuple[str, int]

# Retried as librdkafka does: the coordinator moving or busy, markers still being written.
_COORDINATOR_RETRY = {
    E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress,
    E.concurrent_transactions,
}


class ProduceError(Exception):
    """The write failed; ``code`` is Kafka's error code where the broker gave one."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class Unsupported(Exception):
    """The broker does not serve the versions this client speaks."""


def _schema(api_key: int, response: bool = False) -> Any:
    load = load_response_schema if response else load_request_schema
    return load(api_key, VERSIONS[api_key])


@functools.cache
def _module(api_key: int) -> Any:
    return importlib.import_module(_schema(api_key).__module__)


def _error(code: int) -> str:
    try:
        return E(code).name.upper()
    except ValueError:
        return f"error {code}"


def _retriable(code: int) -> bool:
    try:
        return E(code).retriable
    except ValueError:
        return False


class Connection:
    """One connection to a broker; requests may be sent ahead of reading their answers."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float,
                 security: Mapping[str, str]):
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            context = fetch_auth.tls_context(security)
            self.sock = sock if context is None else context.wrap_socket(
                sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.client_id = client_id.encode()
        self._correlation = 0
        self.pending: deque[tuple[int, Any]] = deque()  # (correlation id, context)
        try:
            self._check_versions()
            fetch_auth.authenticate(
                security, lambda key, version, body: self.call_raw(key, version, body, False))
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def _check_versions(self) -> None:
        body = self.call_raw(API_VERSIONS, 0, b"", False)
        try:
            (error,) = _I16.unpack_from(body, 0)
            (count,) = _I32.unpack_from(body, 2)
            ranges = {key: (lo, hi)
                      for key, lo, hi in struct.iter_unpack(">hhh", body[6 : 6 + 6 * count])}
        except struct.error as exc:
            raise ProduceError(f"unreadable ApiVersions response: {exc}") from None
        for key, version in VERSIONS.items():
            lo, hi = ranges.get(key, (1, 0))
            if error or not lo <= version <= hi:
                raise Unsupported(f"broker serves API {key} v{lo}-v{hi}, not v{version}")

    def send(self, api_key: int, version: int, body: bytes, flexible: bool,
             context: Any = None) -> None:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        header = _HEADER.pack(api_key, version, self._correlation, len(self.client_id))
        tags = b"\x00" if flexible else b""
        size = len(header) + len(self.client_id) + len(tags) + len(body)
        self.sock.sendall(b"".join((_I32.pack(size), header, self.client_id, tags, body)))
        self.pending.append((self._correlation, context))

    def receive(self, flexible: bool) -> tuple[memoryview, Any]:
        """The oldest pending request's answer (its body) and context."""
        (size,) = _I32.unpack(self._read_exactly(4))
        if size < 4:
            raise ConnectionError(f"response of {size} bytes")
        body = self._read_exactly(size)
        (got,) = _I32.unpack_from(body)
        expected, context = self.pending.popleft()
        if got != expected:
            raise ConnectionError(f"response to request {got}, expected {expected}")
        return body[5 if flexible else 4 :], context

    def call_raw(self, api_key: int, version: int, body: bytes, flexible: bool) -> memoryview:
        self.send(api_key, version, body, flexible)
        return self.receive(flexible)[0]

    def call(self, request: Any) -> Any:
        flexible = bool(request.__flexible__)
        body = self.call_raw(request.__api_key__, request.__version__, encode(request), flexible)
        response, _ = decode(_schema(request.__api_key__, response=True), bytes(body), 0)
        return response

    def _read_exactly(self, size: int) -> memoryview:
        return read_exactly(self.sock, size)


@dataclass(eq=False)  # identity: a batch is found again by itself, never by its bytes
class _Batch:
    tp: TopicPartition
    data: bytes
    count: int


@dataclass
class _Partition:
    queue: deque[_Batch] = field(default_factory=deque)  # built, not yet sent
    in_flight: deque[_Batch] = field(default_factory=deque)  # sent, not yet acknowledged
    next_sequence: int = 0
    failed: bool = False  # a batch failed retriably: the rest waits to be sent again


@dataclass(frozen=True)
class Settings:
    bootstrap: tuple[tuple[str, int], ...]
    client_id: str = "chronik-spark-sink"
    acks: int = -1
    idempotent: bool = True
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    request_timeout_ms: int = 30_000
    delivery_timeout_s: float = 120.0
    retry_backoff_s: float = 0.1
    max_request_bytes: int = 1_000_000
    security: Mapping[str, str] = field(default_factory=dict)


BuildBatch = Callable[[int, int, int], bytes]  # (producer id, epoch, base sequence) -> batch


class BatchProducer:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.deadline = time.monotonic() + settings.delivery_timeout_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[TopicPartition, int] = {}
        self.counts: dict[str, int] = {}
        self.connections: dict[int, Connection] = {}
        self.partitions: dict[TopicPartition, _Partition] = {}
        self.producer_id = -1
        self.producer_epoch = -1
        self.coordinator: Connection | None = None
        self.in_transaction: set[TopicPartition] = set()  # added with AddPartitionsToTxn
        self._bootstrap = self._connect_any()

    # -- connections and metadata -------------------------------------------------------

    def _connect(self, host: str, port: int) -> Connection:
        s = self.settings
        return Connection(host, port, s.client_id, s.request_timeout_ms / 1000 + 5, s.security)

    def _connect_any(self) -> Connection:
        errors = []
        for host, port in self.settings.bootstrap:
            try:
                return self._connect(host, port)
            except Unsupported:
                raise
            except (OSError, ConnectionError) as exc:
                errors.append(f"{host}:{port}: {exc}")
        raise ProduceError("no bootstrap server reachable: " + "; ".join(errors))

    def _node(self, node_id: int) -> Connection:
        conn = self.connections.get(node_id)
        if conn is None:
            if node_id not in self.brokers:
                raise ProduceError(f"broker {node_id} is not in the cluster's metadata")
            conn = self.connections[node_id] = self._connect(*self.brokers[node_id])
        return conn

    def _request_any(self, request: Any) -> Any:
        try:
            return self._bootstrap.call(request)
        except (OSError, ConnectionError):
            self._bootstrap.close()
            self._bootstrap = self._connect_any()
            return self._bootstrap.call(request)

    def metadata(self, topics: list[str]) -> dict[str, int]:
        """Partition counts of ``topics``, creating missing ones as a first produce would
        (the broker's auto.create.topics.enable), and their leaders."""
        mod = _module(3)
        wanted = set(topics)
        while True:
            response = self._request_any(mod.MetadataRequest(
                topics=tuple(mod.MetadataRequestTopic(name=t) for t in sorted(wanted)),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            ))
            self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
            waiting = []
            for t in response.topics:
                code = int(t.error_code)
                if code and not _retriable(code):
                    raise ProduceError(f"topic {t.name}: {_error(code)}", code)
                usable = [p for p in t.partitions if int(p.leader_id) >= 0]
                if code or not t.partitions or len(usable) < len(t.partitions):
                    waiting.append(t.name)
                    continue
                self.counts[t.name] = len(t.partitions)
                for p in t.partitions:
                    self.leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
            if not waiting:
                return {t: self.counts[t] for t in topics}
            self._backoff(f"no leader for topic {waiting[0]}")

    def _backoff(self, reason: str) -> None:
        if time.monotonic() > self.deadline:
            raise ProduceError(f"gave up after {self.settings.delivery_timeout_s:.0f}s: {reason}")
        time.sleep(self.settings.retry_backoff_s)

    # -- producer id and transactions ---------------------------------------------------

    def init(self) -> None:
        """Take a producer id (idempotent or transactional); a transactional id's
        coordinator bumps its epoch, fencing earlier producers and aborting what they left."""
        s = self.settings
        if not s.idempotent and s.transactional_id is None:
            return
        mod = _module(22)
        request = mod.InitProducerIdRequest(
            transactional_id=s.transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=s.transaction_timeout_ms),
            producer_id=-1,
            producer_epoch=-1,
        )
        while True:
            if s.transactional_id is not None:
                response = self._coordinator_call(request)
            else:
                response = self._request_any(request)
            code = int(response.error_code)
            if code == 0:
                self.producer_id = int(response.producer_id)
                self.producer_epoch = int(response.producer_epoch)
                return
            self._coordinator_error(code, "InitProducerId")

    def _coordinator_error(self, code: int, what: str) -> None:
        if code not in _COORDINATOR_RETRY:
            raise ProduceError(f"{what}: {_error(code)}", code)
        if code in (E.not_coordinator, E.coordinator_not_available) and self.coordinator:
            self.coordinator.close()
            self.coordinator = None
        self._backoff(f"{what}: {_error(code)}")

    def _coordinator_call(self, request: Any) -> Any:
        while self.coordinator is None:
            mod = _module(10)
            found = self._request_any(mod.FindCoordinatorRequest(
                key=self.settings.transactional_id, key_type=1))
            code = int(found.error_code)
            if code:
                self._coordinator_error(code, "FindCoordinator")
                continue
            self.coordinator = self._connect(found.host, int(found.port))
        try:
            return self.coordinator.call(request)
        except (OSError, ConnectionError):
            self.coordinator.close()
            self.coordinator = None
            return self._coordinator_call(request)

    def _add_partitions(self, tps: list[TopicPartition]) -> None:
        mod = _module(24)
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        request = mod.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.settings.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=tuple(
                mod.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                for t, ps in sorted(by_topic.items())
            ),
        )
        while True:
            response = self._coordinator_call(request)
            codes = [int(r.partition_error_code) for t in response.results_by_topic_v3_and_below
                     for r in t.results_by_partition]
            bad = next((c for c in codes if c), 0)
            if not bad:
                self.in_transaction.update(tps)
                return
            self._coordinator_error(bad, "AddPartitionsToTxn")

    def end_transaction(self, commit: bool) -> None:
        if not self.in_transaction:
            return  # nothing was added: there is no transaction to end (as Kafka's clients)
        mod = _module(26)
        request = mod.EndTxnRequest(
            transactional_id=self.settings.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, committed=commit,
        )
        while True:
            code = int(self._coordinator_call(request).error_code)
            if code == 0:
                self.in_transaction.clear()
                return
            self._coordinator_error(code, "EndTxn")

    # -- producing ----------------------------------------------------------------------

    def append(self, tp: TopicPartition, build: BuildBatch, count: int) -> None:
        """Queue a batch of ``count`` records for ``tp``; ``build`` makes its bytes with
        this producer's id, epoch and the partition's next sequence."""
        part = self.partitions.get(tp)
        if part is None:
            part = self.partitions[tp] = _Partition()
        if self.settings.idempotent or self.settings.transactional_id is not None:
            data = build(self.producer_id, self.producer_epoch, part.next_sequence)
            part.next_sequence = (part.next_sequence + count) & 0x7FFFFFFF
        else:
            data = build(-1, -1, -1)
        part.queue.append(_Batch(tp, data, count))

    def pump(self) -> None:
        """Send what is queued, waiting for answers only where a connection has
        MAX_IN_FLIGHT requests out."""
        if self.settings.transactional_id is not None:
            new = [tp for tp, part in self.partitions.items()
                   if part.queue and tp not in self.in_transaction]
            if new:
                self._add_partitions(new)
        while True:
            by_node: dict[int, list[_Batch]] = {}
            for tp, part in self.partitions.items():
                if part.queue and not part.failed and len(part.in_flight) < MAX_IN_FLIGHT:
                    by_node.setdefault(self.leaders[tp], []).append(part.queue[0])
            if not by_node:
                return
            for node, batches in by_node.items():
                try:
                    conn = self._node(node)
                    if len(conn.pending) >= MAX_IN_FLIGHT:
                        self._receive(conn)
                        break  # plan again: answers free partitions (or put batches back)
                    self._send(conn, batches)
                except (OSError, ConnectionError) as exc:
                    self._recover(f"broker {node}: {exc}")
                    break

    def _send(self, conn: Connection, batches: list[_Batch]) -> None:
        mod = _module(0)
        chosen: list[_Batch] = []
        size = 0
        for b in batches:
            if chosen and size + len(b.data) > self.settings.max_request_bytes:
                break
            chosen.append(b)
            size += len(b.data)
        by_topic: dict[str, list[_Batch]] = {}
        for b in chosen:
            by_topic.setdefault(b.tp[0], []).append(b)
            part = self.partitions[b.tp]
            part.queue.popleft()
            part.in_flight.append(b)
        request = mod.ProduceRequest(
            transactional_id=self.settings.transactional_id,
            acks=self.settings.acks,
            timeout=datetime.timedelta(milliseconds=self.settings.request_timeout_ms),
            topic_data=tuple(
                mod.TopicProduceData(name=t, partition_data=tuple(
                    mod.PartitionProduceData(index=b.tp[1], records=b.data) for b in bs))
                for t, bs in by_topic.items()
            ),
        )
        conn.send(0, VERSIONS[0], encode(request), False, chosen)

    def _receive(self, conn: Connection) -> None:
        body, sent = conn.receive(False)
        response, _ = decode(_schema(0, response=True), bytes(body), 0)
        throttle = response.throttle_time.total_seconds()
        if throttle > 0:
            # Over a produce quota: the broker mutes this connection that long (KIP-219);
            # the next request waits as Kafka's clients wait.
            time.sleep(min(throttle, self.settings.delivery_timeout_s))
        codes = {(t.name, int(p.index)): int(p.error_code)
                 for t in response.responses for p in t.partition_responses}
        retry = []
        for b in sent:
            part = self.partitions[b.tp]
            code = codes.get(b.tp, int(E.unknown_server_error))
            if code in (0, E.duplicate_sequence_number):
                part.in_flight.remove(b)
                continue
            # Behind a batch that failed, the broker refuses the next ones' sequences.
            after_failure = part.failed and code == E.out_of_order_sequence_number
            if _retriable(code) or after_failure:
                part.failed = True
                retry.append(f"{b.tp[0]}-{b.tp[1]}: {_error(code)}")
                continue
            raise ProduceError(f"producing to {b.tp[0]}-{b.tp[1]}: {_error(code)}", code)
        if retry:
            self._recover(retry[0])

    def _recover(self, reason: str) -> None:
        """After a retriable error or a broken connection: drain what is in flight, put
        every batch not acknowledged back in front of its queue (in sequence order), learn
        the leaders again, and go on."""
        for node, conn in list(self.connections.items()):
            try:
                while conn.pending:
                    body, sent = conn.receive(False)
                    response, _ = decode(_schema(0, response=True), bytes(body), 0)
                    for t in response.responses:
                        for p in t.partition_responses:
                            tp = (t.name, int(p.index))
                            part = self.partitions.get(tp)
                            batch = next((b for b in sent if b.tp == tp), None)
                            ok = int(p.error_code) in (0, E.duplicate_sequence_number)
                            if ok and part is not None and batch in part.in_flight:
                                part.in_flight.remove(batch)
            except (OSError, ConnectionError):
                conn.close()
                del self.connections[node]
        for part in self.partitions.values():
            while part.in_flight:
                part.queue.appendleft(part.in_flight.pop())
            part.failed = False
        self._backoff(reason)
        self.metadata(sorted({t for t, _ in self.partitions}))

    def flush(self) -> None:
        """Send everything queued and wait until each batch is acknowledged."""
        while True:
            self.pump()
            busy = [c for c in self.connections.values() if c.pending]
            if not busy and not any(p.queue or p.in_flight for p in self.partitions.values()):
                return
            for conn in busy:
                try:
                    while conn.pending:
                        self._receive(conn)
                except (OSError, ConnectionError) as exc:
                    self._recover(str(exc))
                    break

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()
        if self.coordinator is not None:
            self.coordinator.close()
        self._bootstrap.close()
