"""The web console with a big cluster's numbers on one broker: 10,000 partitions (100
topics of 100) and 1,000 consumer groups with committed offsets (written with
confluent-kafka's AdminClient, as a tool resetting offsets would). The topic and group
pages answer within a generous bound, because only a page's topics and groups are
looked at closely (ListOffsets, DescribeLogDirs, DescribeGroups, OffsetFetch), and
Metadata is cached for a second per session.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import BrokerProcess, free_port, wait_for_port

from .console_api_support import ConsoleClient

pytestmark = pytest.mark.slow

TOPICS = 100
PARTITIONS = 100
GROUPS = 1000
# Seconds a page may take on a loaded two-core machine (they take well under one).
BOUND = 10.0


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("console-scale") / "data",
        {"http.listen": f"127.0.0.1:{port}", "log.segment.bytes": str(1024 * 1024)},
    )
    broker.start()
    wait_for_port(port, 30, proc=broker.proc)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        names = [f"big-{i:03d}" for i in range(TOPICS)]
        for start in range(0, TOPICS, 10):
            futures = admin.create_topics(
                [NewTopic(n, PARTITIONS, 1) for n in names[start : start + 10]],
                request_timeout=120,
            )
            for future in futures.values():
                future.result(180)
        pending = []
        for g in range(GROUPS):
            offsets = [TopicPartition(names[g % TOPICS], g % PARTITIONS, 0)]
            request = ConsumerGroupTopicPartitions(f"group-{g:04d}", offsets)
            pending.append(admin.alter_consumer_group_offsets([request],
                                                              request_timeout=60))
            if len(pending) >= 50:
                for futures in pending:
                    for future in futures.values():
                        future.result(120)
                pending.clear()
        for futures in pending:
            for future in futures.values():
                future.result(120)
        yield broker, port
    finally:
        broker.kill()


def timed(client: ConsoleClient, path: str, **query: object) -> tuple[float, dict]:
    started = time.monotonic()
    doc = client.get(path, **query)
    return time.monotonic() - started, doc


def test_pages_stay_fast_with_10000_partitions_and_1000_groups(
    big: tuple[BrokerProcess, int],
) -> None:
    _, port = big
    c = ConsoleClient(port)
    c.session()
    took, overview = timed(c, "overview")
    assert overview["partitions"] >= TOPICS * PARTITIONS and took < BOUND, took
    took, topics = timed(c, "topics", limit=50)
    assert topics["total"] == TOPICS and len(topics["items"]) == 50 and took < BOUND, took
    assert all(t["partitions"] == PARTITIONS for t in topics["items"])
    took, found = timed(c, "topics", q="big-09", limit=50)
    assert found["total"] == 10 and took < BOUND, took
    took, detail = timed(c, "topics/big-042")
    assert len(detail["partitions"]) == PARTITIONS and took < BOUND, took
    took, groups = timed(c, "groups", limit=50)
    assert groups["total"] == GROUPS and len(groups["items"]) == 50 and took < BOUND, took
    assert all(g["lag"] == 0 and g["state"] == "Empty" for g in groups["items"])
    took, last = timed(c, "groups", offset=GROUPS - 10, limit=50)
    assert [g["group_id"] for g in last["items"]] == [f"group-{g:04d}" for g in range(990, 1000)]
    took, one = timed(c, "groups/group-0420")
    assert one["offsets"] == [{"topic": "big-020", "partition": 20, "committed": 0,
                               "log_end_offset": 0, "lag": 0, "member_id": None}]
    assert took < BOUND, took
    # A refresh loop as the page makes it: each answer well within the bound.
    worst: dict[str, float] = {}
    for _ in range(5):
        for path in ("overview", "topics", "groups"):
            worst[path] = max(worst.get(path, 0.0), timed(c, path)[0])
    assert max(worst.values()) < BOUND, worst
    print("\nworst page times over a refresh loop (ms):",
          {k: round(v * 1000) for k, v in worst.items()})
