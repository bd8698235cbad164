"""The Python data source write path's own ceiling: a sink that takes Spark's Arrow batches
and drops them.

It reads nothing of the rows but their count: what it reaches is what Spark's Python data
source machinery allows on this machine (the JVM turning rows into Arrow, the batches
crossing to the Python worker), the bound for any Python sink.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage


@dataclass
class _Count(WriterCommitMessage):
    rows: int


class _Writer(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Count:
        return _Count(sum(rb.num_rows for rb in iterator))


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "null_sink"

    def writer(self, schema, overwrite: bool) -> _Writer:
        return _Writer()
