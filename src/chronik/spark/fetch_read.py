"""Read one partition's offset range with Kafka's Fetch and decode the batches into Arrow.

The fast path of the source's read tasks. librdkafka hands every record over as a Python
``Message`` object, which cost about as much as the rest of a read together; here the fetched
record batches go from the socket into compiled decoders (``record_decode``) and out as Arrow
buffers, with Python work per fetch and per batch but none per record. While one response is
decoded the next fetch is already on its way.

It reads as Spark's Kafka source does: ``read_uncommitted`` (the Java consumer's default),
CRCs checked, control batches skipped. With ``kafka.isolation.level=read_committed`` it asks
for committed data (the broker stops at the last stable offset) and drops, batch by batch
before the compiled decoder sees them, the batches of the aborted transactions the broker
lists, as Kafka's consumer does. Connections that need TLS or SASL, a broker without Fetch
v11, and message formats older than v2 are read through librdkafka (``arrow_read``)
instead.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from chronik.records.compression import decompress
from chronik.records.control import ABORT, InvalidMarker, read_marker
from chronik.spark import fetch_auth, record_decode
from chronik.spark.arrow_read import deleted, truncated
from chronik.spark.fetch_client import (
    FetchConnection,
    PartitionData,
    ProtocolError,
    Unsupported,
    decode_fetch,
)
from chronik.spark.offsets import OffsetPlanner, admin_client
from chronik.spark.options import Subscription
from chronik.spark.schema import arrow_schema

MAX_WAIT_MS = 500
MAX_BYTES = 16 << 20
_MAX_BYTES_CAP = 1 << 30
_RETRY_BACKOFF_S = 0.2
# Errors after which the leader is looked up again and the fetch retried.
_RETRIABLE = {3, 5, 6, 7, 13, 56, 74, 75}
_OFFSET_OUT_OF_RANGE = 1
_CRC = struct.Struct(">I")
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_PRODUCER_ID = struct.Struct(">q")
_PRODUCER_ID_AT = 43  # in a v2 batch header
_LOG_APPEND_TIME = 0x08


class CorruptRecords(RuntimeError):
    pass


class _NeedsLibrdkafka(Exception):
    def __init__(self, position: int):
        super().__init__(position)
        self.position = position


def usable(conf: Mapping[str, str]) -> bool:
    """Whether the fast path can serve this consumer configuration: plaintext, TLS from
    PEM files, SASL with PLAIN or SCRAM (fetch_auth)."""
    return fetch_auth.servable(conf)


def read_range(
    conf: Mapping[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_s: float,
    fallback: Callable[..., Iterator[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """Yield the records with start <= offset < end as Arrow batches in offset order;
    ``fallback`` (arrow_read.read_range's signature) reads what this path cannot."""
    reader = _PartitionReader(conf, topic, partition, include_headers, poll_timeout_s)
    try:
        yield from reader.read(start, end, fail_on_data_loss)
    except _NeedsLibrdkafka as switch:
        yield from fallback(
            dict(conf), topic, partition, switch.position, end, include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss, poll_timeout_s=poll_timeout_s,
        )
    finally:
        reader.close()


class _PartitionReader:
    def __init__(
        self,
        conf: Mapping[str, str],
        topic: str,
        partition: int,
        include_headers: bool,
        poll_timeout_s: float,
    ):
        self.conf = dict(conf)
        self.topic = topic
        self.name = topic.encode()
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self.poll_timeout_s = poll_timeout_s
        self.max_bytes = int(self.conf.get("max.partition.fetch.bytes", MAX_BYTES))
        self.committed = self.conf.get("isolation.level") == "read_committed"
        self.conn: FetchConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -- the fetch loop -------------------------------------------------------------------

    def read(self, start: int, end: int, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
        position = start
        last_progress = time.monotonic()
        in_flight = False
        while position < end:
            try:
                if not in_flight:
                    self._send(position)
                data = self._receive()
            except (OSError, ProtocolError) as exc:
                if isinstance(exc, Unsupported):
                    raise _NeedsLibrdkafka(position) from None
                self._retry(last_progress, f"{type(exc).__name__}: {exc}")
                in_flight = False
                continue
            in_flight = False
            if data.error_code == _OFFSET_OUT_OF_RANGE:
                moved = self._out_of_range(position, end, fail_on_data_loss)
                if moved is None:
                    return
                position = moved
                continue
            if data.error_code in _RETRIABLE:
                self._retry(last_progress, f"error {data.error_code}")
                continue
            if data.error_code:
                raise RuntimeError(
                    f"fetch from {self.topic}-{self.partition} at offset {position} failed "
                    f"with Kafka error {data.error_code}"
                )
            blob = np.frombuffer(data.records, np.uint8)
            starts, fields, bad = record_decode.scan_batches(blob, 0, len(blob))
            if len(starts) == 0:
                if bad:
                    raise CorruptRecords(
                        f"{self.topic}-{self.partition}: unreadable batch at offset {position}"
                    )
                if len(blob) and self.max_bytes < _MAX_BYTES_CAP:
                    self.max_bytes *= 2  # one batch bigger than a whole fetch: ask for more
                elif data.high_watermark <= position:
                    if fail_on_data_loss:
                        raise truncated(self.topic, self.partition, position, end)
                    return
                elif time.monotonic() - last_progress > self.poll_timeout_s:
                    raise TimeoutError(
                        f"no records from {self.topic}-{self.partition} in "
                        f"{self.poll_timeout_s:.0f}s (reading offsets {position}..{end})"
                    )
                continue
            if (fields[:, 2] != 2).any() or (fields[:, 1] < record_decode.HEADER_SIZE).any():
                raise _NeedsLibrdkafka(position)
            following = max(position, int(fields[-1, 0] + fields[-1, 4]) + 1)
            if following < end:
                self._send(following)  # the broker reads the next range while we decode
                in_flight = True
            skip = self._aborted(data, starts, fields) if self.committed else None
            batch = self._decode(data.records, blob, starts, fields, position, end, skip)
            position = following
            last_progress = time.monotonic()
            if batch is not None:
                yield batch

    def _send(self, position: int) -> None:
        if self.conn is None:
            host, port = self._leader()
            self.conn = FetchConnection(
                host, port, self.conf.get("client.id", "chronik-spark-reader"),
                timeout_s=self.poll_timeout_s,
                security=self.conf,
            )
        self.conn.send_fetch(
            self.name, self.partition, position, MAX_WAIT_MS, self.max_bytes, int(self.committed)
        )

    def _receive(self) -> PartitionData:
        assert self.conn is not None
        return decode_fetch(self.conn.receive(), self.name, self.partition)

    def _retry(self, last_progress: float, why: str) -> None:
        self.close()
        if time.monotonic() - last_progress > self.poll_timeout_s:
            raise TimeoutError(
                f"no records from {self.topic}-{self.partition} in "
                f"{self.poll_timeout_s:.0f}s; last error: {why}"
            )
        time.sleep(_RETRY_BACKOFF_S)

    def _leader(self) -> tuple[str, int]:
        meta = admin_client(self.conf).list_topics(topic=self.topic, timeout=self.poll_timeout_s)
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None or self.partition not in found.partitions:
            raise ProtocolError(f"no metadata for {self.topic}-{self.partition}")
        leader = meta.brokers.get(found.partitions[self.partition].leader)
        if leader is None:
            raise ProtocolError(f"{self.topic}-{self.partition} has no leader")
        return leader.host, leader.port

    def _out_of_range(self, position: int, end: int, fail_on_data_loss: bool) -> int | None:
        """Where to go on after OFFSET_OUT_OF_RANGE; None when the range is over."""
        tp = (self.topic, self.partition)
        planner = OffsetPlanner(self.conf, Subscription(topics=(self.topic,)))
        earliest = planner.earliest([tp])[tp]
        if position < earliest:
            if fail_on_data_loss:
                raise deleted(self.topic, self.partition, position)
            return earliest
        if fail_on_data_loss:
            raise truncated(self.topic, self.partition, position, end)
        return None

    # -- batches to Arrow -----------------------------------------------------------------

    def _aborted(self, data: PartitionData, starts: np.ndarray, fields: np.ndarray) -> set[int]:
        """Indexes of the batches of aborted transactions, by Kafka's consumer rule: a
        producer listed as aborted from a first offset is aborted from the batch that
        reaches that offset until its ABORT marker; its transactional batches meanwhile
        are dropped."""
        if not data.aborted:
            return set()
        pending = sorted(data.aborted, key=lambda a: a[1])
        aborted_pids: set[int] = set()
        skip: set[int] = set()
        next_aborted = 0
        records = data.records
        for i, at in enumerate(starts.tolist()):
            attributes = int(fields[i, 3])
            if not attributes & _TRANSACTIONAL:
                continue
            last = int(fields[i, 0] + fields[i, 4])
            while next_aborted < len(pending) and pending[next_aborted][1] <= last:
                aborted_pids.add(pending[next_aborted][0])
                next_aborted += 1
            (pid,) = _PRODUCER_ID.unpack_from(records, at + _PRODUCER_ID_AT)
            if attributes & _CONTROL:
                try:
                    kind, _ = read_marker(records[at : at + int(fields[i, 1])])
                except InvalidMarker:
                    continue
                if kind == ABORT:
                    aborted_pids.discard(pid)
            elif pid in aborted_pids:
                skip.add(i)
        return skip

    def _decode(
        self,
        records: memoryview,
        blob: np.ndarray,
        starts: np.ndarray,
        fields: np.ndarray,
        lo: int,
        hi: int,
        skip: set[int] | None = None,
    ) -> pa.RecordBatch | None:
        keep = []
        compressed = False
        for i, at in enumerate(starts.tolist()):
            size, attributes = int(fields[i, 1]), int(fields[i, 3])
            (crc,) = _CRC.unpack_from(records, at + 17)
            if crc32c(records[at + 21 : at + size]) != crc:
                raise CorruptRecords(
                    f"{self.topic}-{self.partition}: CRC mismatch in the batch at offset "
                    f"{int(fields[i, 0])}"
                )
            last = fields[i, 0] + fields[i, 4]
            if attributes & _CONTROL or last < lo or fields[i, 0] >= hi or (skip and i in skip):
                continue
            keep.append(i)
            compressed = compressed or bool(attributes & 0x07)
        if not keep:
            return None
        chosen = fields[keep]
        if compressed:
            parts = []
            for i in keep:
                at, size, codec = int(starts[i]), int(fields[i, 1]), int(fields[i, 3]) & 0x07
                section = records[at + record_decode.HEADER_SIZE : at + size]
                parts.append(decompress(codec, section) if codec else section)
            lengths = np.fromiter(map(len, parts), np.int64, len(parts))
            buf = np.frombuffer(b"".join(parts), np.uint8)
            sec_end = np.cumsum(lengths)
            sec_start = sec_end - lengths
        else:
            buf = blob
            sec_start = starts[keep] + record_decode.HEADER_SIZE
            sec_end = starts[keep] + chosen[:, 1]
        attributes = chosen[:, 3]
        (n, offsets, stamps, ts_type, kpos, klen, vpos, vlen, hfirst, headers, bad) = (
            record_decode.decode_sections(
                buf, sec_start, sec_end, chosen[:, 7].astype(np.int64), chosen[:, 0].copy(),
                chosen[:, 5].copy(), chosen[:, 6].copy(),
                (attributes & _LOG_APPEND_TIME) != 0, lo, hi, self.include_headers,
            )
        )
        if bad >= 0:
            raise CorruptRecords(
                f"{self.topic}-{self.partition}: corrupt records in the batch at offset "
                f"{int(chosen[bad, 0])}"
            )
        if n == 0:
            return None
        return self._to_arrow(buf, n, offsets, stamps, ts_type, kpos, klen, vpos, vlen,
                              hfirst, headers)

    def _to_arrow(
        self,
        buf: np.ndarray,
        n: int,
        offsets: np.ndarray,
        stamps: np.ndarray,
        ts_type: np.ndarray,
        kpos: np.ndarray,
        klen: np.ndarray,
        vpos: np.ndarray,
        vlen: np.ndarray,
        hfirst: np.ndarray,
        headers: np.ndarray,
    ) -> pa.RecordBatch:
        schema = self.schema
        columns = [
            _binary(buf, kpos[:n], klen[:n]),
            _binary(buf, vpos[:n], vlen[:n]),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(offsets[:n]),
            pa.array(stamps[:n] * 1000).cast(schema.field("timestamp").type),
            pa.array(ts_type[:n]),
        ]
        if self.include_headers:
            columns.append(_headers(buf, hfirst[: n + 1], headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(buf: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> pa.Array:
    offsets, data = record_decode.gather(buf, pos, lens)
    nulls = lens < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary(), len(pos), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
    )


def _headers(
    buf: np.ndarray, first: np.ndarray, headers: np.ndarray, kind: pa.DataType
) -> pa.Array:
    # Like librdkafka's reader and Spark's Kafka source: a record without headers has null.
    keys = _binary(buf, headers[:, 0], headers[:, 1]).cast(pa.string())  # checks UTF-8
    values = _binary(buf, headers[:, 2], headers[:, 3])
    entries = pa.StructArray.from_arrays([keys, values], fields=list(kind.value_type))
    counts = np.diff(first)
    return pa.ListArray.from_arrays(
        pa.array(first.astype(np.int32)), entries, type=kind,
        mask=pa.array(counts == 0) if (counts == 0).any() else None,
    )

