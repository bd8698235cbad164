"""Stands in for hypothesis in the processes the tests start (brokers, bench scripts,
clients): a production install has no hypothesis, and kio imports it whenever it can,
which costs every process start about 0.1 s of CPU. tests/conftest.py puts this folder
on those processes' PYTHONPATH."""

raise ImportError("hypothesis is a test dependency; the processes tests start do without it")
