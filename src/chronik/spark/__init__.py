"""chronik as a PySpark data source (format ``chronik``) and the projection pipeline on top."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("chronik")`` and friends available in this session."""
    from chronik.spark.source import ChronikDataSource

    spark.dataSource.register(ChronikDataSource)


def session(
    app_name: str = "chronik", master: str | None = None, config: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession with format("chronik") registered; a local one (the default) runs its
    Python workers with this interpreter. See chronik.spark.builder."""
    from chronik.spark.builder import session as build

    return build(app_name, master, config)


__all__ = ["register", "session"]
