"""The console producer and consumer, run as a newcomer runs them."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from .cli_support import chronik, ok, popen, unique


def test_walkthrough_produce_lines_then_consume_from_beginning(broker) -> None:
    b = broker.bootstrap
    topic = unique("walk")
    assert ok("topics", "create", topic, "--partitions", "1", bootstrap=b).lines == [
        f"Created topic {topic}."
    ]
    produced = ok("produce", topic, bootstrap=b, input="hello\nworld\nthird line\n")
    assert "Produced a total of 3 records" in produced.stderr

    consumed = chronik("consume", topic, "--from-beginning", "--max-messages", "3", bootstrap=b)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.lines == ["hello", "world", "third line"]
    assert "Processed a total of 3 messages" in consumed.stderr


def test_keys_headers_and_printed_fields(broker) -> None:
    b = broker.bootstrap
    topic = unique("keys")
    ok("topics", "create", topic, "--partitions", "2", bootstrap=b)
    ok(
        "produce",
        topic,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--header",
        "v=2",
        "--compression",
        "zstd",
        "--partition",
        "1",
        bootstrap=b,
        input="user-1:signed up\nuser-2:logged in: twice\n",
    )
    out = ok(
        "consume",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--print-key",
        "--print-partition",
        "--print-offset",
        "--print-headers",
        "--print-timestamp",
        "--key-separator",
        "=",
        bootstrap=b,
    )
    rows = [line.split("\t") for line in out.lines]
    assert [r[1:] for r in rows] == [
        ["Partition:1", "Offset:0", "source:cli,v:2", "user-1=signed up"],
        ["Partition:1", "Offset:1", "source:cli,v:2", "user-2=logged in: twice"],
    ]
    for row in rows:
        kind, _, ms = row[0].partition(":")
        assert kind == "CreateTime"
        assert abs(int(ms) - time.time() * 1000) < 600_000


def test_piped_json_lines_file_and_json_output(broker, tmp_path: Path) -> None:
    b = broker.bootstrap
    topic = unique("events")
    ok("topics", "create", topic, bootstrap=b)
    events = [{"type": "OrderPlaced", "id": i, "note": "ünïcode"} for i in range(50)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    produced = ok("produce", topic, "--file", str(path), "--acks", "1", bootstrap=b)
    assert "Produced a total of 50 records" in produced.stderr

    out = ok(
        "consume",
        topic,
        "--from-beginning",
        "--max-messages",
        "50",
        "--format",
        "json",
        bootstrap=b,
    )
    records = [json.loads(line) for line in out.lines]
    assert [json.loads(r["value"]) for r in records] == events
    assert [r["offset"] for r in records] == list(range(50))
    assert {r["topic"] for r in records} == {topic}
    assert all(r["key"] is None and r["headers"] == [] for r in records)


def test_group_resumes_from_committed_offset_after_broker_restart(broker) -> None:
    topic = unique("resume")
    group = unique("readers")
    ok("topics", "create", topic, bootstrap=broker.bootstrap)
    ok("produce", topic, bootstrap=broker.bootstrap, input="".join(f"m{i}\n" for i in range(6)))

    first = ok(
        "consume",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "4",
        bootstrap=broker.bootstrap,
    )
    assert first.lines == ["m0", "m1", "m2", "m3"]

    broker.restart()
    ok("produce", topic, bootstrap=broker.bootstrap, input="m6\n")
    second = ok(
        "consume",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "3",
        bootstrap=broker.bootstrap,
    )
    assert second.lines == ["m4", "m5", "m6"]


def test_partition_and_offset_start_point(broker) -> None:
    b = broker.bootstrap
    topic = unique("seek")
    ok("topics", "create", topic, "--partitions", "2", bootstrap=b)
    ok("produce", topic, "--partition", "1", bootstrap=b, input="a\nb\nc\nd\n")
    out = ok(
        "consume",
        topic,
        "--partition",
        "1",
        "--offset",
        "2",
        "--max-messages",
        "2",
        "--print-offset",
        bootstrap=b,
    )
    assert out.lines == ["Offset:2\tc", "Offset:3\td"]
    earliest = ok(
        "consume",
        topic,
        "--partition",
        "1",
        "--offset",
        "earliest",
        "--max-messages",
        "1",
        bootstrap=b,
    )
    assert earliest.lines == ["a"]


def test_timeout_ends_an_idle_consumer(broker) -> None:
    topic = unique("idle")
    ok("topics", "create", topic, bootstrap=broker.bootstrap)
    ok("produce", topic, bootstrap=broker.bootstrap, input="only\n")
    out = ok("consume", topic, "--from-beginning", "--timeout", "2", bootstrap=broker.bootstrap)
    assert out.lines == ["only"]
    assert out.error_lines[-1] == "Processed a total of 1 messages"


def test_sigterm_stops_a_live_consumer_with_its_total(broker) -> None:
    topic = unique("live")
    ok("topics", "create", topic, bootstrap=broker.bootstrap)
    ok("produce", topic, bootstrap=broker.bootstrap, input="x\ny\n")
    proc = popen(
        "consume", topic, "--group", unique("g"), "--from-beginning", bootstrap=broker.bootstrap
    )
    try:
        assert proc.stdout is not None
        # Both records printed means the consumer is running and idle: now stop it.
        assert [proc.stdout.readline(), proc.stdout.readline()] == ["x\n", "y\n"]
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert stdout == ""
    assert stderr.splitlines()[-1] == "Processed a total of 2 messages"


def test_every_compression_round_trips(broker) -> None:
    b = broker.bootstrap
    topic = unique("codecs")
    ok("topics", "create", topic, bootstrap=b)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for codec in codecs:
        ok("produce", topic, "--compression", codec, bootstrap=b, input=f"{codec}-1\n{codec}-2\n")
    out = ok("consume", topic, "--from-beginning", "--max-messages", "10", bootstrap=b)
    assert out.lines == [f"{c}-{i}" for c in codecs for i in (1, 2)]


def test_group_started_from_beginning_keeps_partitions_it_has_not_read_yet(broker) -> None:
    b = broker.bootstrap
    topic = unique("spread")
    group = unique("g")
    ok("topics", "create", topic, "--partitions", "3", bootstrap=b)
    for p in range(3):
        ok("produce", topic, "--partition", str(p), bootstrap=b, input=f"p{p}-a\np{p}-b\n")
    first = ok(
        "consume", topic, "--group", group, "--from-beginning", "--max-messages", "1", bootstrap=b
    )
    assert len(first.lines) == 1
    # The next run, without --from-beginning, must still see every other record.
    rest = ok("consume", topic, "--group", group, "--max-messages", "5", bootstrap=b)
    assert sorted(first.lines + rest.lines) == sorted(f"p{p}-{s}" for p in range(3) for s in "ab")
