"""`chronik bench` small runs: the numbers it prints add up."""

from __future__ import annotations

import json

from .cli_support import ok, unique


def test_bench_produce_then_consume_json(broker) -> None:
    b = broker.bootstrap
    topic = unique("bench")
    produced = json.loads(
        ok(
            "bench",
            "produce",
            "--topic",
            topic,
            "--num-records",
            "5000",
            "--record-size",
            "64",
            "--partitions",
            "3",
            "--acks",
            "all",
            "--compression",
            "lz4",
            "--json",
            bootstrap=b,
        ).stdout
    )
    assert produced["records"] == 5000
    assert produced["records_per_sec"] > 0 and produced["mb_per_sec"] > 0
    lat = produced["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    assert lat["avg"] <= lat["max"]

    assert "PartitionCount: 3" in ok("topics", "describe", topic, bootstrap=b).stdout
    consumed = json.loads(ok("bench", "consume", "--topic", topic, "--json", bootstrap=b).stdout)
    assert consumed["records"] == 5000
    assert consumed["bytes"] == 5000 * 64


def test_bench_text_report_and_throughput_cap(broker) -> None:
    b = broker.bootstrap
    topic = unique("capped")
    out = ok(
        "bench",
        "produce",
        "--topic",
        topic,
        "--num-records",
        "300",
        "--throughput",
        "200",
        bootstrap=b,
    )
    first, second = out.lines
    assert first.startswith("300 records sent in ")
    # 300 records at 200/s cannot take much less than 1.5 s.
    assert float(first.split(" in ")[1].split(" s")[0]) >= 1.4
    assert second.startswith("latency ms: avg ")
    report = ok("bench", "consume", "--topic", topic, "--num-records", "300", bootstrap=b)
    assert report.lines[0].startswith("300 records (0.03 MB) consumed in ")
