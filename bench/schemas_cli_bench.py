"""What `chronik schemas` and the registry's metrics cost, side by side in one run, on one
embedded broker serving the schema registry and Prometheus metrics:

(a) wall time of a command as a user runs it (a new process each time): `chronik schemas
    list` against `chronik topics list` and `chronik --help` (the interpreter's own start);
(b) one /metrics scrape with one subject version registered against one with --versions
    versions over --subjects subjects (the registry's gauges walk every version).

    python bench/schemas_cli_bench.py
    python bench/schemas_cli_bench.py --runs 9 --versions 5000 --subjects 500

Medians; prints ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from chronik.broker.embedded import EmbeddedBroker


def median_seconds(run: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def command(*args: str) -> Callable[[], None]:
    def run() -> None:
        done = subprocess.run([sys.executable, "-m", "chronik", *args], capture_output=True)
        if done.returncode != 0:
            raise SystemExit(f"chronik {' '.join(args)} failed: {done.stderr.decode()}")

    return run


def record(n: int) -> Schema:
    fields = [{"name": "a", "type": "int"}]
    return Schema(json.dumps({"type": "record", "name": f"R{n}", "fields": fields}), "AVRO")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="commands timed per kind")
    parser.add_argument("--versions", type=int, default=2000)
    parser.add_argument("--subjects", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chronik-bench-") as data:
        config = {"schema.registry.listen": "127.0.0.1:0"}
        with EmbeddedBroker(data, config=config, metrics_listen="127.0.0.1:0") as embedded:
            broker = embedded.broker
            assert broker is not None and broker.registry_api is not None
            url = broker.registry_api.url
            assert url is not None
            client = SchemaRegistryClient({"url": url})
            client.set_compatibility(None, "NONE")
            client.register_schema("s0-value", record(0))

            schemas = median_seconds(command("schemas", "list", "--registry-url", url), args.runs)
            topics = median_seconds(
                command("topics", "list", "--bootstrap-server", embedded.bootstrap), args.runs
            )
            bare = median_seconds(command("--help"), args.runs)
            ms = {"schemas list": schemas, "topics list": topics, "--help": bare}
            shown = ", ".join(f"chronik {k} {v * 1000:.0f} ms" for k, v in ms.items())
            print(f"(a) median of {args.runs}: {shown}")
            print(f"    schemas list / topics list = {schemas / topics:.2f}")

            metrics = f"http://127.0.0.1:{broker.metrics_port}/metrics"

            def scrape() -> None:
                with urllib.request.urlopen(metrics, timeout=10) as response:
                    response.read()

            small = median_seconds(scrape, 21)
            for n in range(1, args.versions):
                client.register_schema(f"s{n % args.subjects}-value", record(n))
            large = median_seconds(scrape, 21)
            print(
                f"(b) median of 21 scrapes: 1 version {small * 1000:.2f} ms, "
                f"{args.versions} versions in {args.subjects} subjects {large * 1000:.2f} ms, "
                f"ratio {large / small:.2f}"
            )


if __name__ == "__main__":
    main()
