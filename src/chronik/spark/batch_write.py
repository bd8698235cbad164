"""The sink's fast path: each Arrow batch's rows become record batches per topic partition
(sink_batches, compiled loops) sent by the sink's own producer (produce_client), with no
Python call per row.

It writes what the librdkafka path writes, to the same partitions: the partition column where
set, else librdkafka's partitioner (``kafka.partitioner``, consistent_random by default);
record timestamps are the time of the write (CreateTime); ``compression.type``, ``acks``,
``enable.idempotence``, ``batch.size``, ``batch.num.messages``, ``message.max.bytes``,
``request.timeout.ms``, ``message.timeout.ms``, ``retry.backoff.ms`` and
``transaction.timeout.ms`` keep their librdkafka meaning. Settings this path does not
understand (another ``kafka.*`` key, acks=0, a security setup the Fetch reader's connection
cannot make) leave the write to librdkafka, as does the option ``writer=librdkafka``.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from chronik.records import compression as codecs
from chronik.spark import fetch_auth, sink_batches, sink_log
from chronik.spark import record_encode as enc
from chronik.spark.options import OptionError
from chronik.spark.produce_client import BatchProducer, Settings, Unsupported

# librdkafka producer settings this path takes; their meaning is in the docstring. The
# librdkafka batching and queue knobs are accepted and have nothing to tune here.
_KEYS = frozenset({
    "bootstrap.servers", "client.id", "acks", "request.required.acks", "enable.idempotence",
    "linger.ms", "queue.buffering.max.ms", "batch.size", "batch.num.messages",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "compression.type",
    "compression.codec", "delivery.report.only.error", "log_level", "request.timeout.ms",
    "message.timeout.ms", "delivery.timeout.ms", "transaction.timeout.ms", "partitioner",
    "retry.backoff.ms", "message.max.bytes", "socket.timeout.ms",
}) | fetch_auth.KEYS


# A batch's header and its place in a Produce request (topic, partition, sizes).
_BATCH_FRAMING = 61 + 512


@dataclasses.dataclass(frozen=True)
class FastPath:
    settings: Settings
    codec: int
    partitioner: int
    batch_bytes: int
    batch_records: int


def _int(conf: Mapping[str, object], key: str, default: int) -> int:
    value = conf.get(key)
    return default if value is None else int(str(value))


def _bootstrap(servers: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in servers.split(","):
        item = item.strip().split("://", 1)[-1]
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return tuple(out)


def fast_path(options: Mapping[str, str], conf: Mapping[str, object]) -> FastPath | None:
    """How this path writes with the producer settings ``conf`` (defaults and ``kafka.*``
    options), or None where librdkafka must."""
    writer = options.get("writer", "produce").strip().lower()
    if writer not in ("produce", "librdkafka"):
        raise OptionError(f"option 'writer' must be produce or librdkafka, got {writer!r}")
    if writer == "librdkafka" or any(k not in _KEYS for k in conf):
        return None
    if not fetch_auth.servable({k: str(v) for k, v in conf.items()}):
        return None
    acks = str(conf.get("acks", conf.get("request.required.acks", "all"))).strip().lower()
    idempotent = str(conf.get("enable.idempotence", "false")).strip().lower() == "true"
    codec = codecs.BY_NAME.get(
        str(conf.get("compression.type", conf.get("compression.codec", "none"))).lower())
    kind = enc.KINDS.get(str(conf.get("partitioner", "consistent_random")).lower())
    if acks not in ("all", "-1", "1") or codec is None or kind is None:
        return None
    if idempotent and acks == "1":
        return None  # librdkafka refuses the combination: let it say so
    try:
        settings = Settings(
            bootstrap=_bootstrap(str(conf["bootstrap.servers"])),
            client_id=str(conf.get("client.id", "chronik-spark-sink")),
            acks=1 if acks == "1" else -1,
            idempotent=idempotent,
            request_timeout_ms=_int(conf, "request.timeout.ms", 30_000),
            delivery_timeout_s=_int(
                conf, "message.timeout.ms", _int(conf, "delivery.timeout.ms", 120_000)) / 1000,
            retry_backoff_s=_int(conf, "retry.backoff.ms", 100) / 1000,
            max_request_bytes=_int(conf, "message.max.bytes", 1_000_000),
            transaction_timeout_ms=_int(conf, "transaction.timeout.ms", 60_000),
            security={k: str(v) for k, v in conf.items()},
        )
        # librdkafka's batches stay within message.max.bytes too (framing included), which
        # is about a broker's default max.message.bytes: a bigger batch would be refused.
        limit = min(_int(conf, "batch.size", 1_000_000), settings.max_request_bytes)
        return FastPath(
            settings, codec, kind,
            batch_bytes=max(limit - _BATCH_FRAMING, 1),
            batch_records=_int(conf, "batch.num.messages", 10_000),
        )
    except ValueError:
        return None  # a value librdkafka may read differently: its own path says


def open_producer(path: FastPath, transactional_id: str | None = None) -> BatchProducer | None:
    """A producer with its id taken, or None where the broker lacks a version it needs."""
    settings = path.settings
    if transactional_id is not None:
        settings = dataclasses.replace(settings, transactional_id=transactional_id)
    try:
        producer = BatchProducer(settings)
    except Unsupported:
        return None
    try:
        producer.init()
    except BaseException:
        producer.close()
        raise
    return producer


def _topics(rb: pa.RecordBatch, topic: str | None) -> tuple[list[str], np.ndarray]:
    if topic is not None:
        return [topic], np.zeros(rb.num_rows, np.int64)
    if "topic" not in rb.schema.names:
        raise OptionError("set the 'topic' option or give the data a 'topic' column")
    column = rb.column("topic")
    if column.null_count:
        raise OptionError("a row has a null topic and no 'topic' option is set")
    coded = column.dictionary_encode()
    return coded.dictionary.to_pylist(), coded.indices.to_numpy().astype(np.int64)


def _marker_column(
    rb: pa.RecordBatch,
    names: list[str],
    topic_of: np.ndarray,
    columns: dict[str, pa.Array],
    marker: str,
    skip: Counter[str],
    seen: dict[str, int],
) -> tuple[pa.Array, np.ndarray]:
    """The ``chronik.sink`` header value of each row (sink_log's row identity) and which
    rows to write: as many copies of a row as ``skip`` counts are left out."""
    n = rb.num_rows
    keys = columns["key"].to_pylist() if columns.get("key") is not None else [None] * n
    values = columns["value"].to_pylist()
    parts = rb.column("partition").to_pylist() if "partition" in rb.schema.names else [None] * n
    headers = rb.column("headers").to_pylist() if "headers" in rb.schema.names else [None] * n
    out: list[bytes | None] = []
    keep = np.ones(n, np.bool_)
    for i in range(n):
        hdrs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
        digest = sink_log.row_identity(names[topic_of[i]], parts[i], keys[i], values[i], hdrs)
        if skip[digest] > 0:
            skip[digest] -= 1
            keep[i] = False
            out.append(None)
            continue
        count = seen.get(digest, 0)
        seen[digest] = count + 1
        out.append(f"{marker}/{digest}.{count}".encode())
    return pa.array(out, pa.binary()), keep


def _as_binary(column: pa.Array | None) -> pa.Array | None:
    if column is not None and (pa.types.is_string(column.type)
                               or pa.types.is_large_string(column.type)):
        return column.cast(pa.binary())
    return column


def write(
    path: FastPath,
    producer: BatchProducer,
    batches: list[pa.RecordBatch],
    topic: str | None,
    encoded: dict[str, object] | None = None,
    marker: str | None = None,
    skip: Counter[str] | None = None,
) -> tuple[int, int]:
    """Write every row (with a marker, tagged with its identity, leaving out the copies
    ``skip`` counts) and wait until each is acknowledged: (rows written, rows skipped).
    ``encoded`` maps a schema'd column's name to its encoder (value_encode)."""
    rng = random.Random()
    skip = Counter(skip or ())
    seen: dict[str, int] = {}
    transactional = producer.settings.transactional_id is not None
    written = skipped = 0
    for rb in batches:
        n = rb.num_rows
        if not n:
            continue
        names, topic_of = _topics(rb, topic)
        if any(t not in producer.counts for t in names):
            producer.metadata([t for t in names if t not in producer.counts])
        counts = np.array([producer.counts[t] for t in names], np.int64)
        columns: dict[str, pa.Array | None] = {
            name: _as_binary(rb.column(name)) if name in rb.schema.names else None
            for name in ("key", "value")
        }
        for name, encoder in (encoded or {}).items():
            rows_topics = [names[t] for t in topic_of]
            columns[name] = pa.array(encoder.encode(rb.column(name), rows_topics),  # type: ignore[attr-defined]
                                     pa.binary())
        keep = None
        mark = None
        if marker is not None:
            values, keep = _marker_column(rb, names, topic_of, columns, marker, skip, seen)
            mark = sink_batches.Marker(sink_log.HEADER.encode(),
                                       sink_batches.binary(values, n, "marker"))
        batch = sink_batches.row_batch(rb, columns, mark)
        given = rb.column("partition") if "partition" in rb.schema.names else None
        parts = sink_batches.partitions(path.partitioner, batch.keys, given, topic_of, counts, rng)
        rows = np.arange(n, dtype=np.int64) if keep is None else np.flatnonzero(keep)
        skipped += n - len(rows)
        written += len(rows)
        group = topic_of[rows] * (int(counts.max()) + 1) + parts[rows]
        order = rows[np.argsort(group, kind="stable")]
        sorted_group = np.sort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(sorted_group)) + 1
        now = int(time.time() * 1000)
        for run in np.split(order, bounds):
            if not len(run):
                continue
            tp = (names[topic_of[run[0]]], int(parts[run[0]]))
            for chunk in sink_batches.chunks(run, batch, path.batch_bytes, path.batch_records):
                section = sink_batches.records_section(chunk, batch)
                count = len(chunk)

                def build(pid: int, epoch: int, seq: int, section=section, count=count,
                          now=now) -> bytes:
                    return sink_batches.record_batch(section, count, now, path.codec, pid, epoch,
                                                     seq, transactional)

                producer.append(tp, build, count)
        producer.pump()
    producer.flush()
    return written, skipped
