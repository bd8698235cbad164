"""The Python data source path's own ceiling: a source that yields ready-made Arrow batches.

It has the chronik schema and the same batch size, but no Kafka: what it reaches is what
Spark's Python data source machinery allows on this machine, the bound for any reader.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from chronik.spark.schema import arrow_schema, spark_schema

BATCH = 50_000


def ready_batch(record_size: int, keys: int) -> pa.RecordBatch:
    schema = arrow_schema(False)
    key_values = [f"key-{i % keys:06d}".encode() for i in range(BATCH)]
    return pa.RecordBatch.from_arrays([
        pa.array(key_values, pa.binary()),
        pa.array([b"x" * record_size] * BATCH, pa.binary()),
        pa.repeat(pa.scalar("t", pa.string()), BATCH),
        pa.repeat(pa.scalar(0, pa.int32()), BATCH),
        pa.array(np.arange(BATCH, dtype=np.int64)),
        pa.array(np.full(BATCH, 1_700_000_000_000_000, np.int64)).cast(schema[5].type),
        pa.array(np.zeros(BATCH, np.int32)),
    ], schema=schema)


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.records = int(options["records"])
        self.parts = int(options.get("partitions", "4"))
        self.size = int(options.get("recordSize", "100"))
        self.keys = int(options.get("keys", "10000"))

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batch = ready_batch(self.size, self.keys)
        todo = self.records // self.parts + (partition.value < self.records % self.parts)
        while todo > 0:
            yield batch if todo >= BATCH else batch.slice(0, todo)
            todo -= BATCH


class ArrowCeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_ceiling"

    def schema(self):
        return spark_schema(False)

    def reader(self, schema) -> _Reader:
        return _Reader(dict(self.options))
