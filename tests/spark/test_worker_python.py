"""The bank example's SparkSession runs its Python workers with the interpreter that
started it, even when the first `python3` on PATH is another one without pyarrow.

Run in a subprocess without PYSPARK_PYTHON (this suite's conftest sets it), as a user
runs `.venv/bin/python examples/bank/run.py` from a fresh clone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("bank_run", sys.argv[1])
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
spark = run.spark_session("local[1]")
workers = spark.range(1).rdd.map(lambda _: __import__("sys").executable).collect()
rows = spark.range(3).mapInArrow(lambda batches: batches, "id long").count()  # needs pyarrow
print(json.dumps({"driver": sys.executable, "workers": workers, "rows": rows}))
spark.stop()
"""


@pytest.mark.slow
def test_bank_example_session_runs_workers_with_its_own_python(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "examples" / "bank" / "run.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["workers"] == [result["driver"]]
    assert result["rows"] == 3
