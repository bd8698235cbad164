"""The ``chronik`` PySpark data source: Spark's Kafka source and sink, over librdkafka."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from chronik.spark.options import parse_read_options
from chronik.spark.readers import BatchReader, StreamReader
from chronik.spark.schema import spark_schema
from chronik.spark.writers import BatchWriter, StreamWriter


class ChronikDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "chronik"

    def schema(self) -> StructType:
        include = self.options.get("includeHeaders", "false").strip().lower() == "true"
        return spark_schema(include)

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self.options, schema)
