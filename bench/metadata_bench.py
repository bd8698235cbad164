"""What a request for every topic's metadata costs: confluent-kafka's
AdminClient.list_topics() against one chronik broker holding many partitions (100
topics x 100 partitions), restarted once they exist (as console_load.py does). Prints
the first call after the restart, the median of the next calls, and the broker's CPU
per call (user + system from /proc: nearly all of it the event loop's time on the
request, as the broker has nothing else to do meanwhile).

    python bench/metadata_bench.py [--baseline ../other-checkout] [--calls 10]
        [--topics 100] [--partitions 100]

With --baseline the other checkout's broker is measured in the same run, after this
one's, and the ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Chronik  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def populate(bootstrap: str, topics: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"big-{i:03d}" for i in range(topics)]
    for start in range(0, topics, 10):
        futures = admin.create_topics(
            [NewTopic(n, partitions, 1) for n in names[start : start + 10]], request_timeout=120
        )
        for future in futures.values():
            future.result(300)


def measure(src: Path, args: argparse.Namespace) -> dict[str, Any]:
    broker = Chronik(src=src)
    broker.start(60)
    try:
        populate(broker.bootstrap, args.topics, args.partitions)
        assert broker.proc is not None
        broker.proc.terminate()
        broker.proc.wait(60)
        broker.start(120)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # The client's own bootstrap Metadata, so the first timed call is the first
        # request for every topic's metadata the broker serves.
        admin.list_topics("big-000", timeout=30)
        # What a broker does once after a start (loading __consumer_offsets) is done.
        time.sleep(args.settle)
        times = []
        cpu0 = broker.cpu_seconds()
        for call in range(args.calls + 1):
            if call == 1:
                first_cpu = (broker.cpu_seconds() - cpu0) * 1000
                cpu0 = broker.cpu_seconds()
            started = time.perf_counter()
            md = admin.list_topics(timeout=60)
            times.append((time.perf_counter() - started) * 1000)
        # /proc counts CPU in 10-ms ticks: the later calls' mean, not each call's.
        later_cpu = (broker.cpu_seconds() - cpu0) * 1000 / args.calls
        partitions = sum(len(t.partitions) for t in md.topics.values())
    finally:
        broker.stop()
    return {
        "src": str(src),
        "partitions_listed": partitions,
        "first_ms": times[0],
        "first_cpu_ms": first_cpu,
        "median_ms": statistics.median(times[1:]),
        "mean_cpu_ms": later_cpu,
        "calls_ms": times,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds between the restart and the first timed call")
    args = parser.parse_args()
    trees = {"this": Path(__file__).resolve().parent.parent / "src"}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve() / "src"
    rows = {}
    for name, src in trees.items():
        row = measure(src, args)
        rows[name] = row
        print(f"{name:8}  {row['partitions_listed']} partitions  first call "
              f"{row['first_ms']:7.1f} ms (broker CPU {row['first_cpu_ms']:5.0f} ms)  "
              f"median of {args.calls} {row['median_ms']:7.1f} ms "
              f"(broker CPU {row['mean_cpu_ms']:5.1f} ms each)", flush=True)
    if "baseline" in rows:
        for q in ("first_ms", "median_ms"):
            print(f"this/baseline {q}: {rows['this'][q] / rows['baseline'][q]:.3f}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"metadata-{stamp}.json"
    out.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                               "results": rows}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
