"""What naming a schema subject costs the event store's HTTP API, side by side in one run
on one `chronik serve --http-listen ... --schema-registry-listen ...`:

(a) appends of the same JSON documents as plain values (stored as their JSON text) against
    appends naming an Avro subject (checked, Avro-encoded, framed) and a JSON Schema
    subject (checked, framed): --keys keys, --batch events per POST, one keep-alive
    connection, each POST answered once durable;
(b) reads of the same keys' events (pages of --batch) without and with ``decode=true``.

    python bench/eventstore_schema_bench.py            # a minute or two
    python bench/eventstore_schema_bench.py --quick    # smoke run, a few seconds

Best of --runs, alternating the order of the kinds each run. Two figures per kind: events
per second (wall clock, so it moves with whatever else the machine runs and with fsync
times), and the broker's CPU time per event (user + system, from /proc; steadier on a
shared machine), each with its ratio to the plain kind. Prints a table and writes JSON to
bench/results/.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote
from urllib.request import Request, urlopen

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import chronik_revision, machine  # noqa: E402
from brokers import Chronik, free_port  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
KINDS = ("plain", "avro", "json")

AVRO = {
    "type": "record",
    "name": "AccountEvent",
    "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["OPEN", "MOVE"]}},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "kind": {"enum": ["OPEN", "MOVE"]},
        "amount": {"type": "integer"},
        "note": {"type": ["null", "string"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["kind", "amount", "note", "tags"],
}


class ChronikWithRegistry(Chronik):
    """`chronik serve` with the event store's HTTP API and the schema registry."""

    def __init__(self) -> None:
        super().__init__()
        self.http_port = free_port()
        self.registry_port = free_port()

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--http-listen",
            f"127.0.0.1:{self.http_port}",
            "--schema-registry-listen",
            f"127.0.0.1:{self.registry_port}",
        ]


def register(port: int, subject: str, schema: dict[str, Any], schema_type: str) -> int:
    body = {"schema": json.dumps(schema), "schemaType": schema_type}
    request = Request(
        f"http://127.0.0.1:{port}/subjects/{quote(subject)}/versions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["id"])


def document(key: int, n: int) -> dict[str, Any]:
    return {
        "kind": "OPEN" if n == 0 else "MOVE",
        "amount": key * 1000 + n,
        "note": None if n % 3 else f"transfer {n} of account {key}",
        "tags": ["card", "eur"] if n % 2 else [],
    }


def appends(port: int, topic: str, query: str, keys: int, batch: int) -> float:
    """Events per second of ``keys`` appends of ``batch`` events each."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    bodies = [
        json.dumps({"events": [{"value": document(k, n)} for n in range(batch)]}).encode()
        for k in range(keys)
    ]
    start = time.perf_counter()
    for k, body in enumerate(bodies):
        path = f"/v1/topics/{topic}/keys/acct-{k}/events{query}"
        conn.request("POST", path, body=body, headers={"If-None-Match": "*"})
        response = conn.getresponse()
        answer = response.read()
        if response.status != 201:
            raise RuntimeError(f"append {k}: {response.status} {answer[:300]!r}")
    seconds = time.perf_counter() - start
    conn.close()
    return keys * batch / seconds


def reads(port: int, topic: str, query: str, keys: int, batch: int, decoded: bool) -> float:
    """Events per second reading back each key's events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    start = time.perf_counter()
    for k in range(keys):
        conn.request("GET", f"/v1/topics/{topic}/keys/acct-{k}/events?limit={batch}{query}")
        response = conn.getresponse()
        doc = json.loads(response.read())
        if response.status != 200 or len(doc["events"]) != batch:
            raise RuntimeError(f"read {k}: {response.status} {str(doc)[:300]}")
        if decoded and doc["events"][0]["value_json"] != document(k, 0):
            raise RuntimeError(f"read {k}: decoded {doc['events'][0]} differs")
    seconds = time.perf_counter() - start
    conn.close()
    return keys * batch / seconds


def ratio(value: float, base: float) -> float | None:
    """value / base; None when the base is too small to measure (CPU time counts in clock
    ticks, so a quick run may see none)."""
    return value / base if base > 0 else None


def shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    keys = args.keys or (50 if args.quick else 1000)
    runs = args.runs or (1 if args.quick else 3)

    broker = ChronikWithRegistry()
    broker.start()
    best_append = dict.fromkeys(KINDS, 0.0)
    best_read = dict.fromkeys(KINDS, 0.0)
    cpu_append = dict.fromkeys(KINDS, float("inf"))
    cpu_read = dict.fromkeys(KINDS, float("inf"))
    events = keys * args.batch
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for run in range(runs):
            order = KINDS if run % 2 == 0 else tuple(reversed(KINDS))
            topics = {}
            for kind in order:
                topic = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
                config = {"key.versioning.enable": "true"}
                admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
                query = ""
                if kind == "avro":
                    register(broker.registry_port, f"{topic}-value", AVRO, "AVRO")
                    query = "?subject_strategy=topic"
                elif kind == "json":
                    register(broker.registry_port, f"{topic}-value", JSON_SCHEMA, "JSON")
                    query = "?subject_strategy=topic"
                topics[kind] = topic
                cpu = broker.cpu_seconds()
                rate = appends(broker.http_port, topic, query, keys, args.batch)
                cpu_append[kind] = min(cpu_append[kind], (broker.cpu_seconds() - cpu) / events)
                best_append[kind] = max(best_append[kind], rate)
            for kind in order:
                decoded = kind != "plain"
                query = "&decode=true" if decoded else ""
                cpu = broker.cpu_seconds()
                rate = reads(broker.http_port, topics[kind], query, keys, args.batch, decoded)
                cpu_read[kind] = min(cpu_read[kind], (broker.cpu_seconds() - cpu) / events)
                best_read[kind] = max(best_read[kind], rate)
    finally:
        broker.stop()

    print(f"\n{keys} keys x {args.batch} events per POST / read, best of {runs}")
    print(f"{'':32}{'events/s':>10}{'vs plain':>10}{'CPU us/event':>14}{'vs plain':>10}")
    names = {"plain": "plain JSON values", "avro": "Avro subject", "json": "JSON Schema subject"}
    for what, rates, cpus in (("append", best_append, cpu_append), ("read", best_read, cpu_read)):
        for kind in KINDS:
            name = f"{what}, {names[kind]}" + (
                " decode" if what == "read" and kind != "plain" else ""
            )
            print(
                f"{name:32}{rates[kind]:>10,.0f}{rates[kind] / rates['plain']:>10.2f}"
                f"{cpus[kind] * 1e6:>14.1f}{shown(ratio(cpus[kind], cpus['plain'])):>10}"
            )
    report = {
        "bench": "eventstore_schema",
        "mode": "quick" if args.quick else "full",
        "chronik": chronik_revision(),
        "machine": machine(),
        "keys": keys,
        "batch": args.batch,
        "runs": runs,
        "append_events_per_s": best_append,
        "read_events_per_s": best_read,
        "append_over_plain": {k: v / best_append["plain"] for k, v in best_append.items()},
        "read_over_plain": {k: v / best_read["plain"] for k, v in best_read.items()},
        "append_cpu_us_per_event": {k: v * 1e6 for k, v in cpu_append.items()},
        "read_cpu_us_per_event": {k: v * 1e6 for k, v in cpu_read.items()},
        "append_cpu_over_plain": {k: ratio(v, cpu_append["plain"]) for k, v in cpu_append.items()},
        "read_cpu_over_plain": {k: ratio(v, cpu_read["plain"]) for k, v in cpu_read.items()},
    }
    out = args.output or RESULTS_DIR / f"eventstore-schema-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
