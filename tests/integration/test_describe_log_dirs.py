"""DescribeLogDirs (API 35) with kafka-python's admin client: each broker's data dir, the
size of each partition it stores, and its volume's total and usable bytes."""

from __future__ import annotations

from pathlib import Path

from kafka.admin import KafkaAdminClient

from .helpers import RawClient, code, confluent_produce, create_topic, req, sample_records
from .helpers import topic_name as unique_topic


def test_sizes_of_the_partitions_stored(broker) -> None:
    topic = unique_topic("dirs")
    create_topic(broker.bootstrap, topic, 2)
    confluent_produce(broker.bootstrap, topic, sample_records(300), acks="all")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs({topic: [0, 1]})
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == Path(broker.data_dir).resolve()
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    (entry,) = log_dir["topics"]
    assert entry["name"] == topic
    sizes = {p["partition_index"]: p["partition_size"] for p in entry["partitions"]}
    on_disk = {
        p: sum(f.stat().st_size for f in (Path(broker.data_dir) / f"{topic}-{p}").glob("*.log"))
        for p in (0, 1)
    }
    assert sizes == on_disk and sum(sizes.values()) > 300 * 20
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in entry["partitions"])
    with RawClient(broker.bootstrap) as raw:
        response = raw.request(req(35, 4, topics=None))
    (result,) = response.results
    assert topic in {t.name for t in result.topics}
    assert code(response.error_code) == 0
