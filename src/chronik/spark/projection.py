"""Event-sourced projections on Structured Streaming: fold each key's events into a read model.

A projection reads an event topic with the ``chronik`` source, folds the events of each key in
offset order into a state (Spark keyed state, so it survives restarts through the checkpoint),
and in every micro-batch writes:

- each changed state to a compacted read-model topic (key = the event key, value = state JSON),
- the same states to a Parquet table, one directory per micro-batch (``batch_id=N``) written
  in overwrite mode, so a replayed batch replaces rather than adds; ``read_model_from_parquet``
  picks each key's latest version,
- each event that fails to parse or to apply to a dead-letter topic, with the reason in the
  ``error`` header; the key's state stays as it was and the stream goes on.

Events are handed to ``Fold.parse`` as the record's value bytes, or, with
``ProjectionConfig.value_format`` (avro, json, protobuf: the source's ``valueFormat``), decoded
by the source against the events topic's subject in the schema registry (the latest schema,
so events written under older versions arrive in its shape, with its defaults), as a dict.
A typed event's dead letter holds it as JSON; a value that does not decode under the subject
is dead-lettered as the bytes it was, with the source's decoding left to ``decodeErrorMode=null``.

Topic writes use the sink's exactly-once protocol with the micro-batch id, so a projection
killed at any point and restarted ends with the same read model as one that ran through.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

STATE_SCHEMA = "state string, partition int, offset long"
OUTPUT_SCHEMA = "kind string, key binary, value binary, error string, partition int, offset long"


class Fold(Protocol):
    """The domain: how to read an event and how it changes a key's state."""

    read_model_schema: StructType  # the state's JSON as Parquet columns

    def parse(self, key: bytes, value: Any) -> dict[str, Any]:
        """Decode one event: ``value`` is its bytes, or with a value format its decoded
        value (a dict; None when it did not decode). Raise to dead-letter it."""
        ...

    def apply(self, state: dict[str, Any] | None, event: dict[str, Any]) -> dict[str, Any]:
        """The state after `event`; raise to reject the event and keep the state."""
        ...


class UndecodableValue(ValueError):
    """The event's value did not decode under the events topic's schema."""


def _dead_letter_value(value: Any, raw: bytes | None) -> bytes | None:
    """A typed event's dead-letter value: the bytes that did not decode, or the event as JSON."""
    if value is None:
        return raw
    return json.dumps(value, sort_keys=True, default=str).encode()


def fold_function(fold: Fold, typed: bool = False) -> Callable:
    """The applyInPandasWithState function: per key, events in offset order, one try each.
    ``typed``: the frames' ``value`` holds decoded values (dicts) and ``value_raw`` the
    bytes of those that did not decode."""

    def run(key: tuple, frames: Iterator[Any], group_state: Any) -> Iterator[Any]:
        import pandas as pd

        (raw_key,) = key
        state, last = None, (-1, -1)
        if group_state.exists:
            text, part, off = group_state.get
            state, last = json.loads(text), (part, off)
        frame = pd.concat(list(frames)).sort_values(["partition", "offset"], kind="stable")
        rows = []
        applied = None
        raws = frame["value_raw"] if typed else frame["value"]
        for value, raw, part, off in zip(
            frame["value"], raws, frame["partition"], frame["offset"], strict=True
        ):
            if part == last[0] and off <= last[1]:
                continue  # already folded in: a replay of records this state has seen
            try:
                if typed and value is None and raw is not None:
                    raise UndecodableValue("the value does not decode under the topic's schema")
                if raw_key is None:
                    raise ValueError("event has no key")
                event = fold.parse(raw_key, value)
                new_state = fold.apply(state, event)
            except Exception as exc:  # noqa: BLE001 - any failure of one event is that event's
                payload = _dead_letter_value(value, raw) if typed else value
                rows.append(("dead", raw_key, payload, f"{type(exc).__name__}: {exc}", part, off))
                continue
            new_state["version"] = (state or {}).get("version", 0) + 1
            state, applied = new_state, (int(part), int(off))
        if applied is not None:
            text = json.dumps(state, sort_keys=True)
            rows.append(("state", raw_key, text.encode(), None, *applied))
            group_state.update((text, *applied))
        columns = ["kind", "key", "value", "error", "partition", "offset"]
        yield pd.DataFrame(rows, columns=columns)

    return run


@dataclass
class ProjectionConfig:
    bootstrap: str
    events_topic: str
    read_model_topic: str
    dead_letter_topic: str
    parquet_path: str
    checkpoint: str
    max_offsets_per_trigger: int | None = None
    write_dead_letters: bool = True
    value_format: str | None = None  # avro, json, protobuf: events decoded (None: bytes)
    schema_registry_url: str | None = None  # None: the registry the brokers serve

    def typed(self) -> bool:
        return bool(self.value_format)

    @property
    def sink_id(self) -> str:
        """Stable for one checkpoint, new for a replay (which starts a fresh checkpoint)."""
        where = self.checkpoint if "://" in self.checkpoint else os.path.abspath(self.checkpoint)
        digest = hashlib.sha1(where.encode()).hexdigest()[:16]
        return f"projection-{digest}"


def states_and_dead_letters(spark: SparkSession, fold: Fold, cfg: ProjectionConfig) -> DataFrame:
    from pyspark.sql.streaming.state import GroupStateTimeout

    reader = (
        spark.readStream.format("chronik")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.events_topic)
        .option("startingOffsets", "earliest")
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    columns = ["key", "value", "partition", "offset"]
    if cfg.typed():
        # null mode: an event that does not decode is one dead letter, not a failed query.
        reader = reader.option("valueFormat", cfg.value_format).option("decodeErrorMode", "null")
        if cfg.schema_registry_url:
            reader = reader.option("schemaRegistryUrl", cfg.schema_registry_url)
        columns.insert(2, "value_raw")
    events = reader.load().select(*columns)
    return events.groupBy("key").applyInPandasWithState(
        fold_function(fold, cfg.typed()),
        OUTPUT_SCHEMA,
        STATE_SCHEMA,
        "update",
        GroupStateTimeout.NoTimeout,
    )


def _write_topic(df: DataFrame, cfg: ProjectionConfig, topic: str, sink: str, batch: int) -> None:
    (
        df.write.format("chronik")
        .mode("append")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("topic", topic)
        .option("sinkId", f"{cfg.sink_id}-{sink}")
        .option("batchId", str(batch))
        .save()
    )


def write_micro_batch(fold: Fold, cfg: ProjectionConfig) -> Callable[[DataFrame, int], None]:
    def write(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            states = batch.where(F.col("kind") == "state")
            dead = batch.where(F.col("kind") == "dead")
            _write_topic(states.select("key", "value"), cfg, cfg.read_model_topic, "rm", batch_id)
            headers = F.array(
                F.struct(F.lit("error").alias("key"), F.encode("error", "UTF-8").alias("value")),
                F.struct(
                    F.lit("source").alias("key"),
                    F.encode(
                        F.format_string("%s-%d@%d", F.lit(cfg.events_topic), "partition", "offset"),
                        "UTF-8",
                    ).alias("value"),
                ),
            )
            if cfg.write_dead_letters:
                _write_topic(
                    dead.select("key", "value", headers.alias("headers")),
                    cfg,
                    cfg.dead_letter_topic,
                    "dlq",
                    batch_id,
                )
            parsed = states.select(
                F.from_json(F.col("value").cast("string"), fold.read_model_schema).alias("s")
            ).select("s.*")
            parsed.write.mode("overwrite").parquet(f"{cfg.parquet_path}/batch_id={batch_id}")
        finally:
            batch.unpersist()

    return write


def start_projection(
    spark: SparkSession,
    fold: Fold,
    cfg: ProjectionConfig,
    available_now: bool = False,
    processing_time: str = "2 seconds",
) -> StreamingQuery:
    writer = (
        states_and_dead_letters(spark, fold, cfg)
        .writeStream.outputMode("update")
        .option("checkpointLocation", cfg.checkpoint)
        .foreachBatch(write_micro_batch(fold, cfg))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=processing_time)
    )
    return writer.queryName(f"projection-{cfg.events_topic}").start()


def read_model_from_parquet(spark: SparkSession, path: str, key: str) -> DataFrame:
    """Each key's latest state from the per-batch Parquet directories."""
    latest = Window.partitionBy(key).orderBy(F.col("version").desc())
    return (
        spark.read.parquet(path)
        .withColumn("_rank", F.row_number().over(latest))
        .where("_rank = 1")
        .drop("_rank", "batch_id")
    )


def read_model_from_topic(
    spark: SparkSession, bootstrap: str, topic: str, schema: StructType
) -> DataFrame:
    """Each key's latest state from the read-model topic, as compaction would keep it."""
    records = (
        spark.read.format("chronik")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    latest = Window.partitionBy("key").orderBy(F.col("offset").desc())
    return (
        records.withColumn("_rank", F.row_number().over(latest))
        .where("_rank = 1")
        .select(F.from_json(F.col("value").cast("string"), schema).alias("s"))
        .select("s.*")
    )
