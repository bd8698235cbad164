"""Spark writers of the ``chronik`` sink: rows in Spark's Kafka sink layout become records.

Input columns as Spark's Kafka sink takes them: ``value`` (required), ``key``, ``topic``
(unless the ``topic`` option is set, which wins), ``partition``, ``headers``.
Streaming writes, and batch writes given ``sinkId`` + ``batchId`` options, are exactly-once per
batch through the sink log (see ``sink_log``).

With ``transactional=true`` each task's rows are instead one Kafka transaction. Its
transactional id is derived from the write (the query id for a stream, an id drawn on the
driver for a batch write) and the task's partition, so every attempt of one task shares
it: a new attempt's init_transactions bumps the producer epoch, which aborts whatever an
earlier attempt left open and fences that attempt, so a zombie writer cannot add a row.
read_committed readers see a task's rows all at once, or none.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from chronik.spark import batch_write, sink_log
from chronik.spark.offsets import OffsetPlanner, admin_client
from chronik.spark.options import OptionError, Subscription, kafka_config, option_bool, quiet
from chronik.spark.schema_options import parse_schema_options, wants_schemas
from chronik.spark.value_encode import ColumnEncoder

_PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": "20",
    "batch.size": str(1 << 20),
    "queue.buffering.max.messages": "1000000",
    "compression.type": "lz4",
    "delivery.report.only.error": True,  # a delivery callback per failed row, not per row
}


@dataclass
class WriteResult(WriterCommitMessage):
    rows: int
    skipped: int
    sink_id: str | None = None


def _as_bytes(column: pa.Array) -> pa.Array:
    """Key and value may be strings, as in Spark's Kafka sink: written as UTF-8."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.binary())
    return column


def check_schema(schema: StructType, topic_option: str | None) -> None:
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise OptionError("the data to write needs a 'value' column")
    if topic_option is None and "topic" not in names:
        raise OptionError("set the 'topic' option or give the data a 'topic' column")


# How long a task's transaction may stay open before the coordinator aborts it.
TRANSACTION_TIMEOUT_MS = "300000"


def transactional_id(prefix: str, write_id: str, partition: int) -> str:
    """One id per (write, task partition): every attempt of a task shares it, so each new
    attempt fences the ones before."""
    return f"{prefix}{write_id}-{partition}"


class _RowProducer:
    def __init__(self, options: Mapping[str, str], schema: StructType | None = None):
        self.kafka = kafka_config(options)
        self.topic = options.get("topic")
        self.transactional = option_bool(options, "transactional", False)
        self.id_prefix = options.get("transactionalIdPrefix", "chronik-spark-")
        # Schema'd key/value columns (valueFormat, keyFormat): column -> encoder.
        self.encoders: dict[str, ColumnEncoder] = {}
        schemas = parse_schema_options(options, self.kafka) if wants_schemas(options) else None
        if schemas is not None and schema is not None:
            names = {f.name: f.dataType for f in schema.fields}
            for fmt in schemas.columns:
                if fmt.column in names:
                    self.encoders[fmt.column] = ColumnEncoder(fmt, schemas, names[fmt.column])
        # Record batches built from the Arrow columns, or None: one produce() per row.
        self.fast = batch_write.fast_path(options, {**_PRODUCER_DEFAULTS, **self.kafka})

    def producer(self, txn_id: str | None = None) -> Producer:
        conf = {**_PRODUCER_DEFAULTS, **self.kafka}
        if txn_id is not None:
            conf.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
            conf["transactional.id"] = txn_id
        return Producer(quiet(conf))

    def transactional_write(self, batches: list[pa.RecordBatch], txn_id: str) -> WriteResult:
        """All rows of a task in one transaction, committed before the task reports."""
        fast = batch_write.open_producer(self.fast, txn_id) if self.fast else None
        if fast is not None:
            try:
                try:
                    rows, _ = batch_write.write(self.fast, fast, batches, self.topic,
                                                self.encoders)
                    fast.end_transaction(commit=True)
                except BaseException:
                    with contextlib.suppress(Exception):
                        fast.end_transaction(commit=False)
                    raise
            finally:
                fast.close()
            return WriteResult(rows, 0)
        producer = self.producer(txn_id)
        producer.init_transactions(60)
        producer.begin_transaction()
        try:
            rows, _ = self.produce_all(batches, producer=producer)
            producer.commit_transaction(120)
        except BaseException:
            # Fenced or already failing: the coordinator aborts it in time anyway.
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(30)
            raise
        return WriteResult(rows, 0)

    def produce_all(
        self,
        batches: list[pa.RecordBatch],
        marker: str | None = None,
        skip: Counter[str] | None = None,
        producer: Producer | None = None,
    ) -> tuple[int, int]:
        """Produce every row; with a marker, tag each row with its identity, and leave out
        as many copies of a row as `skip` counts for its digest."""
        fast = batch_write.open_producer(self.fast) if self.fast and producer is None else None
        if fast is not None:
            try:
                return batch_write.write(self.fast, fast, batches, self.topic, self.encoders,
                                         marker, skip)
            finally:
                fast.close()
        skip = Counter(skip or ())
        producer = producer or self.producer()
        errors: list = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                errors.append(err)

        rows = skipped = 0
        seen: dict[str, int] = {}
        for rb in batches:
            cols = {name: _as_bytes(rb.column(name)).to_pylist() if name in ("key", "value")
                    and name not in self.encoders else rb.column(name).to_pylist()
                    for name in rb.schema.names if name not in self.encoders}
            n = rb.num_rows
            topics = [self.topic] * n if self.topic else cols["topic"]
            for name, encoder in self.encoders.items():
                cols[name] = encoder.encode(rb.column(name), topics)
            values = cols["value"]
            keys = cols.get("key") or [None] * n
            parts = cols.get("partition") or [None] * n
            headers = cols.get("headers") or [None] * n
            for i in range(n):
                hdrs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
                if marker is not None:
                    digest = sink_log.row_identity(topics[i], parts[i], keys[i], values[i], hdrs)
                    if skip[digest] > 0:
                        skip[digest] -= 1
                        skipped += 1
                        continue
                    count = seen.get(digest, 0)
                    seen[digest] = count + 1
                    hdrs.append((sink_log.HEADER, f"{marker}/{digest}.{count}".encode()))
                if topics[i] is None:
                    raise OptionError("a row has a null topic and no 'topic' option is set")
                kwargs = {"partition": parts[i]} if parts[i] is not None else {}
                while True:
                    try:
                        producer.produce(
                            topics[i], value=values[i], key=keys[i], headers=hdrs or None,
                            on_delivery=on_delivery, **kwargs,
                        )
                        break
                    except BufferError:
                        producer.poll(0.1)
                rows += 1
                if rows % 1000 == 0:
                    producer.poll(0)  # serve delivery reports now and then, not per row
        remaining = producer.flush(120)
        if errors:
            raise KafkaException(errors[0])
        if remaining:
            raise TimeoutError(f"{remaining} records not delivered within 120s")
        return rows, skipped

    def target_ends(self, batches: list[pa.RecordBatch], producer: Producer) -> dict:
        topics = {self.topic} if self.topic else {
            t for rb in batches for t in rb.column("topic").unique().to_pylist() if t
        }
        if not topics:
            return {}
        for topic in topics:
            # A producer's metadata request for a topic lets the broker create it, as the
            # first produce would (auto.create.topics.enable); the intent needs its ends.
            producer.list_topics(topic=topic, timeout=30)
        planner = OffsetPlanner(self.kafka, Subscription(topics=tuple(sorted(topics))))
        return planner.latest(planner.partitions())


def _exactly_once_write(
    core: _RowProducer, iterator: Iterator[pa.RecordBatch], sink_id: str, batch: int, task: int
) -> WriteResult:
    batches = [rb for rb in iterator if rb.num_rows]
    if not batches:
        return WriteResult(0, 0, sink_id)  # nothing to write, nothing to remember
    topic = sink_log.log_topic(sink_id)
    sink_log.ensure_log(admin_client(core.kafka), topic)
    state = sink_log.read_state(core.kafka, topic)
    if batch <= state.last_commit:
        return WriteResult(0, sum(rb.num_rows for rb in batches), sink_id)
    skip = sink_log.written_seqs(core.kafka, state, sink_id, batch, task)
    producer = core.producer()
    ends = core.target_ends(batches, producer)
    sink_log.write_record(producer, topic, "intent", sink_log.intent(batch, task, ends))
    rows, skipped = core.produce_all(batches, marker=f"{sink_id}/{batch}/{task}", skip=skip)
    return WriteResult(rows, skipped, sink_id)


def _commit(core: _RowProducer, sink_id: str, batch: int) -> None:
    topic = sink_log.log_topic(sink_id)
    sink_log.ensure_log(admin_client(core.kafka), topic)
    sink_log.write_record(core.producer(), topic, "commit", {"batch": batch})


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType):
        check_schema(schema, options.get("topic"))
        self.core = _RowProducer(options, schema)
        self.sink_id = options.get("sinkId")
        batch = options.get("batchId")
        if (self.sink_id is None) != (batch is None):
            raise OptionError("options 'sinkId' and 'batchId' go together")
        if self.core.transactional and self.sink_id is not None:
            raise OptionError("option 'transactional' does not go with 'sinkId'/'batchId'")
        self.batch = int(batch) if batch is not None else None
        # Drawn once on the driver: every task attempt of this write derives its id from it.
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        if self.core.transactional:
            from pyspark import TaskContext

            task = TaskContext.get().partitionId()  # type: ignore[union-attr]
            txn_id = transactional_id(self.core.id_prefix, self.write_id, task)
            return self.core.transactional_write(list(iterator), txn_id)
        if self.sink_id is None:
            rows, _ = self.core.produce_all(list(iterator))
            return WriteResult(rows, 0)
        from pyspark import TaskContext

        task = TaskContext.get().partitionId()  # type: ignore[union-attr]
        return _exactly_once_write(self.core, iterator, self.sink_id, self.batch, task)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.sink_id is not None:
            _commit(self.core, self.sink_id, self.batch)  # type: ignore[arg-type]


class StreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once per micro-batch; the sink id is option ``sinkId`` or the query's id."""

    def __init__(self, options: Mapping[str, str], schema: StructType):
        check_schema(schema, options.get("topic"))
        self.core = _RowProducer(options, schema)
        self.sink_id = options.get("sinkId")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        sink_id = self.sink_id or ctx.getLocalProperty("sql.streaming.queryId")
        if self.core.transactional:
            txn_id = transactional_id(self.core.id_prefix, sink_id, ctx.partitionId())
            return self.core.transactional_write(list(iterator), txn_id)
        return _exactly_once_write(self.core, iterator, sink_id, batch, ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.core.transactional:
            return  # each task committed its own transaction
        ids = {m.sink_id for m in messages if isinstance(m, WriteResult) and m.sink_id}
        for sink_id in ids:
            _commit(self.core, sink_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # the intents left behind make the retry skip what this attempt wrote
