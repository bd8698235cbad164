"""topics, offsets and groups administration, run as subprocesses."""

from __future__ import annotations

import time

from .cli_support import chronik, ok, popen, unique


def table(lines: list[str]) -> list[dict[str, str]]:
    header, *rows = [line.split() for line in lines]
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_topics_create_list_describe_alter_delete(broker) -> None:
    b = broker.bootstrap
    topic = unique("orders")
    ok(
        "topics",
        "create",
        topic,
        "--partitions",
        "2",
        "--config",
        "retention.ms=86400000",
        "--config",
        "cleanup.policy=compact",
        bootstrap=b,
    )
    assert topic in ok("topics", "list", bootstrap=b).lines

    described = ok("topics", "describe", topic, bootstrap=b).lines
    assert described[0].startswith(f"Topic: {topic}\tPartitionCount: 2\tReplicationFactor: 1")
    assert "cleanup.policy=compact" in described[0]
    assert "retention.ms=86400000" in described[0]
    assert [line.split("\t")[2] for line in described[1:]] == ["Partition: 0", "Partition: 1"]

    ok(
        "topics",
        "alter",
        topic,
        "--config",
        "retention.ms=1000",
        "--delete-config",
        "cleanup.policy",
        "--partitions",
        "3",
        bootstrap=b,
    )
    described = ok("topics", "describe", topic, bootstrap=b).lines
    assert "PartitionCount: 3" in described[0]
    assert "retention.ms=1000" in described[0]
    assert "cleanup.policy" not in described[0]

    shrink = chronik("topics", "alter", topic, "--partitions", "1", bootstrap=b)
    assert shrink.returncode != 0
    assert shrink.error_lines == [
        f"chronik: error: topic '{topic}' has 3 partitions; the count can only grow"
    ]

    again = chronik("topics", "create", topic, bootstrap=b)
    assert again.returncode != 0 and again.error_lines == [
        f"chronik: error: topic '{topic}' already exists"
    ]
    ok("topics", "create", topic, "--if-not-exists", bootstrap=b)

    assert ok("topics", "delete", topic, bootstrap=b).lines == [f"Deleted topic {topic}."]
    deadline = time.monotonic() + 10
    while topic in ok("topics", "list", bootstrap=b).lines and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in ok("topics", "list", bootstrap=b).lines


def test_offsets_show_earliest_and_latest_per_partition(broker) -> None:
    b = broker.bootstrap
    topic = unique("offs")
    ok("topics", "create", topic, "--partitions", "2", bootstrap=b)
    ok("produce", topic, "--partition", "0", bootstrap=b, input="a\nb\nc\n")
    ok("produce", topic, "--partition", "1", bootstrap=b, input="d\n")
    rows = table(ok("offsets", topic, bootstrap=b).lines)
    assert rows == [
        {"TOPIC": topic, "PARTITION": "0", "EARLIEST": "0", "LATEST": "3", "RECORDS": "3"},
        {"TOPIC": topic, "PARTITION": "1", "EARLIEST": "0", "LATEST": "1", "RECORDS": "1"},
    ]
    future = ok("offsets", topic, "--time", "2999-01-01T00:00:00Z", bootstrap=b)
    assert [r["AT-TIME"] for r in table(future.lines)] == ["3", "1"]
    past = ok("offsets", topic, "--time", "2000-01-01T00:00:00+00:00", bootstrap=b)
    assert [r["AT-TIME"] for r in table(past.lines)] == ["0", "0"]


def test_groups_describe_lag_reset_and_delete(broker) -> None:
    b = broker.bootstrap
    topic = unique("lag")
    group = unique("billing")
    ok("topics", "create", topic, bootstrap=b)
    ok("produce", topic, bootstrap=b, input="".join(f"r{i}\n" for i in range(10)))
    ok("consume", topic, "--group", group, "--from-beginning", "--max-messages", "4", bootstrap=b)

    listed = table(ok("groups", "list", bootstrap=b).lines)
    assert {"GROUP": group, "STATE": "Empty"} in listed

    described = ok("groups", "describe", group, bootstrap=b)
    assert described.error_lines == [f"Consumer group '{group}' is Empty with 0 members."]
    row = table(described.lines)[0]
    assert (row["TOPIC"], row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == (
        topic,
        "4",
        "10",
        "6",
    )

    dry = ok("groups", "reset-offsets", group, "--topic", topic, "--to-offset", "1", bootstrap=b)
    assert table(dry.lines)[0]["NEW-OFFSET"] == "1"
    assert "Dry run" in dry.stderr
    assert table(ok("groups", "describe", group, bootstrap=b).lines)[0]["CURRENT-OFFSET"] == "4"

    ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        f"{topic}:0",
        "--to-earliest",
        "--execute",
        bootstrap=b,
    )
    assert table(ok("groups", "describe", group, bootstrap=b).lines)[0]["LAG"] == "10"
    ok("groups", "reset-offsets", group, "--all-topics", "--to-latest", "--execute", bootstrap=b)
    assert table(ok("groups", "describe", group, bootstrap=b).lines)[0]["LAG"] == "0"
    ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--execute",
        bootstrap=b,
    )
    assert table(ok("groups", "describe", group, bootstrap=b).lines)[0]["CURRENT-OFFSET"] == "0"
    # Out-of-range targets are clamped to the log, as Kafka does.
    ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-offset",
        "99",
        "--execute",
        bootstrap=b,
    )
    assert table(ok("groups", "describe", group, bootstrap=b).lines)[0]["CURRENT-OFFSET"] == "10"

    # The group resumes where it was reset to.
    ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to-offset",
        "8",
        "--execute",
        bootstrap=b,
    )
    resumed = ok("consume", topic, "--group", group, "--max-messages", "2", bootstrap=b)
    assert resumed.lines == ["r8", "r9"]

    assert ok("groups", "delete", group, bootstrap=b).lines == [f"Deleted group {group}."]
    missing = chronik("groups", "describe", group, bootstrap=b)
    assert missing.returncode != 0
    assert missing.error_lines == [f"chronik: error: consumer group '{group}' does not exist"]


def test_reset_and_delete_refuse_an_active_group(broker) -> None:
    b = broker.bootstrap
    topic = unique("busy")
    group = unique("active")
    ok("topics", "create", topic, bootstrap=b)
    ok("produce", topic, bootstrap=b, input="one\n")
    proc = popen("consume", topic, "--group", group, "--from-beginning", bootstrap=b)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "one\n"
        described = ok("groups", "describe", group, bootstrap=b)
        assert "is Stable with 1 member." in described.stderr
        member = table(described.lines)[0]
        assert member["CONSUMER-ID"] != "-" and member["CLIENT-ID"] == "chronik-cli"

        reset = chronik(
            "groups",
            "reset-offsets",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
            bootstrap=b,
        )
        assert reset.returncode != 0
        assert len(reset.error_lines) == 1
        assert reset.error_lines[0].startswith(
            f"chronik: error: cannot reset offsets of group '{group}': it is Stable"
        )
        deleted = chronik("groups", "delete", group, bootstrap=b)
        assert deleted.returncode != 0
        assert len(deleted.error_lines) == 1 and "NON_EMPTY_GROUP" in deleted.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
