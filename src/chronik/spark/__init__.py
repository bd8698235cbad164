"""chronik as a PySpark data source (format ``chronik``) and the projection pipeline on top."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("chronik")`` and friends available in this session."""
    from chronik.spark.source import ChronikDataSource

    spark.dataSource.register(ChronikDataSource)


__all__ = ["register"]
