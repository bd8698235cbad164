"""The ``chronik`` PySpark data source: Spark's Kafka source and sink, over librdkafka.

With ``valueFormat`` / ``keyFormat`` (chronik.spark.schema_options) the columns are typed by
the subjects' schemas in the schema registry and decoded record by record.
"""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from chronik.spark.options import (
    ReadOptions,
    kafka_config,
    parse_read_options,
    parse_subscription,
)
from chronik.spark.readers import BatchReader, StreamReader
from chronik.spark.schema import spark_schema
from chronik.spark.schema_options import (
    DecodePlan,
    parse_schema_options,
    plan_decoding,
    wants_schemas,
)
from chronik.spark.writers import BatchWriter, StreamWriter


class ChronikDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "chronik"

    def _decode_plan(self) -> DecodePlan | None:
        """The reader schemas of the subscribed topics; resolved once per instance."""
        if not wants_schemas(self.options):
            return None
        plan = getattr(self, "_plan", None)
        if plan is None:
            kafka = kafka_config(self.options)
            schemas = parse_schema_options(self.options, kafka)
            assert schemas is not None
            plan = self._plan = plan_decoding(schemas, _topics(self.options, kafka))
        return plan

    def schema(self) -> StructType:
        include = self.options.get("includeHeaders", "false").strip().lower() == "true"
        base = spark_schema(include)
        plan = self._decode_plan()
        return plan.spark_fields(base) if plan is not None else base

    def _read_options(self, streaming: bool) -> ReadOptions:
        options = parse_read_options(self.options, streaming=streaming)
        plan = self._decode_plan()
        return dataclasses.replace(options, decode=plan) if plan is not None else options

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(self._read_options(streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(self._read_options(streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self.options, schema)


def _topics(options: dict[str, str], kafka: dict[str, str]) -> list[str]:
    subscription = parse_subscription(options)
    if subscription.topics:
        return list(subscription.topics)
    if subscription.assign is not None:
        return list(subscription.assign)
    from chronik.spark.offsets import OffsetPlanner

    return sorted({t for t, _ in OffsetPlanner(kafka, subscription).partitions()})
