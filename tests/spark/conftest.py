"""One SparkSession and one chronik broker for all Spark tests: Spark is slow to start."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
# Spark's Python workers are fresh interpreters: they must find chronik too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p
)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

pyspark = pytest.importorskip("pyspark")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A chronik broker; CHRONIK_SPARK_BOOTSTRAP points the tests at another Kafka instead."""
    external = os.environ.get("CHRONIK_SPARK_BOOTSTRAP")
    if external:
        yield type("External", (), {"bootstrap": external})()
        return
    from chronik.broker.embedded import EmbeddedBroker

    broker = EmbeddedBroker(data_dir=tmp_path_factory.mktemp("spark-broker") / "data", port=0)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap(spark_broker: object) -> str:
    return spark_broker.bootstrap  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    from chronik.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("chronik-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_factory(bootstrap: str) -> Callable[..., str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def make(partitions: int = 2, config: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
        for f in futures.values():
            f.result(30)
        return name

    return make


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes, list | None]],
    partition: int | None = None,
    timestamp: int | None = None,
) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for key, value, headers in records:
        kwargs: dict = {}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        producer.produce(topic, key=key, value=value, headers=headers, **kwargs)
    assert producer.flush(30) == 0
