"""Schema registry throughput: reads and registrations per second against one chronik
broker serving the registry (``chronik serve --schema-registry-listen``), beside the
durable append a registration stands on, in one run.

A registration is a parse, a compatibility check and one acks=all append to _schemas;
the peer row is that append alone: one acks=all produce of a record of the same size,
one at a time, to a topic of the same broker. The ratio registrations/s : produces/s is
what the registry's own work costs over the log's. Reads are GET /schemas/ids/{id} and
GET /subjects/{s}/versions/latest over kept-alive connections (what a deserializer and a
serializer ask), one client and eight at once.

    python bench/schema_registry_bench.py            # about half a minute
    python bench/schema_registry_bench.py --quick
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import Chronik, free_port  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# The registry port of the broker under test, set once it is started.
PORT = [0]


class RegistryBroker(Chronik):
    def __init__(self) -> None:
        super().__init__()
        self.registry_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--schema-registry-listen", f"127.0.0.1:{self.registry_port}"]


def schema(n: int) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": f"Event{n}",
            "namespace": "bench",
            "fields": [
                {"name": "id", "type": "string"},
                {"name": "amount", "type": "long"},
                {"name": "note", "type": ["null", "string"], "default": None},
            ],
        }
    )


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"} if data else {}
        self.conn.request(method, path, data, headers)
        response = self.conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return json.loads(payload)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def run_clients(threads: int, work: Callable[[Client, int], None]) -> float:
    """Seconds for ``threads`` clients, each with its own connection, to run ``work``."""
    began = time.perf_counter()
    workers = [threading.Thread(target=work, args=(Client(PORT[0]), i)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - began


def registrations(start: int, count: int, threads: int) -> float:
    def work(client: Client, offset: int) -> None:
        for n in range(start + offset, start + count, threads):
            client.call("POST", f"/subjects/bench-{n}/versions", {"schema": schema(n)})

    return rate(count, run_clients(threads, work))


def reads(ids: int, count: int, threads: int) -> float:
    def work(client: Client, offset: int) -> None:
        for n in range(offset, count, threads):
            if n % 2:
                client.call("GET", f"/schemas/ids/{n % ids + 1}")
            else:
                client.call("GET", f"/subjects/bench-{n % ids}/versions/latest")

    return rate(count, run_clients(threads, work))


def durable_produces(bootstrap: str, count: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("bench-appends", 1, 1)])["bench-appends"].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    value = schema(0).encode()
    producer.produce("bench-appends", key=b"k", value=value)
    producer.flush(10)
    began = time.perf_counter()
    for _ in range(count):
        producer.produce("bench-appends", key=b'{"keytype":"SCHEMA"}', value=value)
        producer.flush(10)
    return rate(count, time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    regs = 100 if args.quick else 600
    read_count = 2000 if args.quick else 20000
    broker = RegistryBroker()
    broker.start()
    try:
        rows = {}
        PORT[0] = broker.registry_port
        rows["registrations/s, 1 client"] = registrations(0, regs, 1)
        rows["registrations/s, 8 clients"] = registrations(regs, regs, 8)
        rows["acks=all produces/s, 1 client (peer)"] = durable_produces(broker.bootstrap, regs)
        rows["reads/s, 1 client"] = reads(regs, read_count, 1)
        rows["reads/s, 8 clients"] = reads(regs, read_count, 8)
    finally:
        broker.stop()
    ratio = rows["registrations/s, 1 client"] / rows["acks=all produces/s, 1 client (peer)"]
    width = max(len(k) for k in rows)
    for name, value in rows.items():
        print(f"{name:<{width}}  {value:10.0f}")
    print(f"{'registration : durable produce':<{width}}  {ratio:10.2f}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    output = args.output or RESULTS / f"schema-registry-bench-{stamp}.json"
    output.write_text(json.dumps({"rows": rows, "ratio": ratio, "quick": args.quick}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
