"""Spark batch and streaming readers of the ``chronik`` source.

Both plan offset ranges on the driver and read them on executors; one input partition is one
topic-partition's range, split further when ``minPartitions`` asks for more parallelism.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from chronik.spark import fetch_read
from chronik.spark.arrow_read import DataLossError, read_range
from chronik.spark.offsets import (
    TP,
    OffsetPlanner,
    PartitionOffsets,
    from_json_offsets,
    to_json_offsets,
)
from chronik.spark.options import ReadOptions


@dataclass
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.topic, self.partition, self.start, self.end))


def plan_ranges(
    start: PartitionOffsets, end: PartitionOffsets, min_partitions: int | None
) -> list[OffsetRange]:
    ranges = [
        OffsetRange(t, p, start.get((t, p), 0), e)
        for (t, p), e in sorted(end.items())
        if e > start.get((t, p), 0)
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    # Spark's rule: split big ranges in proportion to their size, keeping each range's order.
    total = sum(r.end - r.start for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        size = r.end - r.start
        parts = max(1, min(size, math.floor(size / total * min_partitions)))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        out.extend(
            OffsetRange(r.topic, r.partition, lo, hi)
            for lo, hi in zip(bounds, bounds[1:], strict=False)
        )
    return out


def _read(options: ReadOptions, r: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(r, OffsetRange):
        return iter(())  # Spark plans one placeholder partition when there is nothing to read
    raw = _read_raw(options, r)
    if options.decode is None:
        return raw
    return _decoded(options, r, raw)


def _decoded(
    options: ReadOptions, r: OffsetRange, raw: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    from pyspark.sql.pandas.types import to_arrow_schema

    from chronik.spark.schema import spark_schema
    from chronik.spark.value_decode import BatchDecoder

    plan = options.decode
    schema = to_arrow_schema(plan.spark_fields(spark_schema(options.include_headers)),
                             timezone="UTC")
    decode = BatchDecoder(plan, schema)
    for batch in raw:
        yield decode(batch, r.topic, r.partition)


def _read_raw(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    conf = options.consumer_config()
    if options.reader == "fetch" and fetch_read.usable(conf):
        return fetch_read.read_range(
            conf, r.topic, r.partition, r.start, r.end,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_s=options.poll_timeout_s,
            fallback=read_range,
        )
    return read_range(
        conf,
        r.topic,
        r.partition,
        r.start,
        r.end,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_s=options.poll_timeout_s,
    )


def _check_start(
    planner: OffsetPlanner, start: PartitionOffsets, fail_on_data_loss: bool
) -> PartitionOffsets:
    """Move starts that retention already deleted to the log start, or fail, as Spark does."""
    earliest = planner.earliest(start)
    lost = {tp: off for tp, off in start.items() if off < earliest.get(tp, 0)}
    if lost and fail_on_data_loss:
        names = ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(lost.items()))
        raise DataLossError(
            f"offsets no longer available: {names}; set failOnDataLoss=false to skip them"
        )
    return {tp: max(off, earliest.get(tp, off)) for tp, off in start.items()}


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        o = self.options
        planner = OffsetPlanner(o.kafka, o.subscription)
        tps = planner.partitions()
        start = planner.resolve(o.starting, tps, True, o.ts_strategy)
        end = planner.resolve(o.ending, tps, False)
        start = _check_start(planner, start, o.fail_on_data_loss)
        return plan_ranges(start, end, o.min_partitions)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control (maxOffsetsPerTrigger) and AvailableNow."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self.planner = OffsetPlanner(options.kafka, options.subscription)
        self._available_now: PartitionOffsets | None = None

    def initialOffset(self) -> dict:
        o = self.options
        tps = self.planner.partitions()
        return to_json_offsets(self.planner.resolve(o.starting, tps, True, o.ts_strategy))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def _latest(self) -> PartitionOffsets:
        return self.planner.latest(self.planner.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        until = self._available_now if self._available_now is not None else self._latest()
        # Partitions that appeared since the last batch are read from their beginning.
        new = [tp for tp in until if tp not in begin]
        begin.update(self.planner.earliest(new))
        shrunk = sorted(tp for tp in begin if tp in until and until[tp] < begin[tp])
        if shrunk and self.options.fail_on_data_loss:
            names = ", ".join(f"{t}-{p} ({begin[(t, p)]} -> {until[(t, p)]})" for t, p in shrunk)
            raise DataLossError(
                f"end offsets went back: {names}; was the topic deleted and created again? "
                "Set failOnDataLoss=false to go on from the new end"
            )
        for tp, off in begin.items():
            until.setdefault(tp, off)  # a partition that vanished stays where it was
        if isinstance(limit, ReadMaxRows):
            until = rate_limit(limit.max_rows, begin, until)
        return to_json_offsets(until)

    def reportLatestOffset(self) -> dict | None:
        return to_json_offsets(self._latest())

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin = from_json_offsets(start)
        until = from_json_offsets(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.planner.earliest(new))
        begin = _check_start(
            self.planner, {tp: begin[tp] for tp in until}, self.options.fail_on_data_loss
        )
        return plan_ranges(begin, until, self.options.min_partitions)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        pass


def rate_limit(limit: int, begin: PartitionOffsets, until: PartitionOffsets) -> PartitionOffsets:
    """Spark's KafkaMicroBatchStream.rateLimit: share `limit` between partitions by backlog."""
    sizes = {tp: end - begin[tp] for tp, end in until.items() if end - begin.get(tp, end) > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out: PartitionOffsets = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin[tp] + step)
    return out


__all__ = ["TP", "BatchReader", "OffsetRange", "StreamReader", "plan_ranges", "rate_limit"]
