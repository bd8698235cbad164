"""Which interpreter a SparkSession built by chronik gives its Python workers."""

from __future__ import annotations

import sys

import pytest

from chronik.spark.builder import worker_python


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)


@pytest.mark.parametrize("master", [None, "local", "local[2]", "local[*]"])
def test_a_local_session_runs_this_interpreter(master, monkeypatch):
    assert worker_python(master) == sys.executable
    import os

    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_an_explicit_pyspark_python_wins(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    assert worker_python("local[2]") == "/opt/python/bin/python3"


def test_cluster_masters_and_spark_submit_are_left_alone(monkeypatch):
    assert worker_python("spark://master:7077") is None
    assert worker_python("yarn") is None
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert worker_python(None) is None
