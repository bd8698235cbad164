"""A SparkSession whose Python workers run the interpreter that builds it.

PySpark starts its Python workers (UDFs, data source readers and writers) with
$PYSPARK_PYTHON, else the first `python3` on PATH: not the virtualenv running the
driver, which is where pyarrow and chronik are installed. For a session that runs on
this machine, point the workers at ``sys.executable`` unless PYSPARK_PYTHON says
otherwise. Under spark-submit, or with a cluster master, the interpreter is the
cluster's business (`spark.pyspark.python`) and is left alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def runs_here(master: str | None) -> bool:
    """Whether a session built now with this master (None: the builder's default,
    local[*]) runs its workers on this machine, from this process."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit started us: its settings rule
        return False
    return master is None or master.startswith("local")


def worker_python(master: str | None) -> str | None:
    """The interpreter a session's Python workers should run, or None to leave it to
    Spark. Also sets PYSPARK_PYTHON, which is what PySpark itself reads."""
    if not runs_here(master):
        return None
    return os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def session(
    app_name: str = "chronik",
    master: str | None = None,
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create a SparkSession with format("chronik") registered; a local one runs
    its Python workers with this interpreter."""
    from pyspark.sql import SparkSession

    from chronik.spark import register

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    python = worker_python(master)
    if python is not None:
        builder = builder.config("spark.pyspark.python", python)
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
