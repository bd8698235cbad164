"""What an open web console costs the broker's own clients: produce latency (p50/p99,
confluent-kafka, acks=1, linger.ms=0, a fixed rate) on one chronik broker holding many
partitions and consumer groups, with no console, with consoles refreshing as the page
does (overview, topics and groups every 3 s each), and with a console loop asking back
to back (the worst case). Rounds take turns in one run; prints p50/p99 per mode and the
ratios to no console, and writes results/console-load-<UTC time>[-quick].json.

  python bench/console_load.py                 # 100 topics x 100 partitions, 1000 groups
  python bench/console_load.py --quick         # 10 x 10, 50 groups, short rounds

The console's clients run in their own process, so their CPU is not the producer's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Chronik, free_port  # noqa: E402
from workloads import produce_latency  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PAGES = ("overview", "topics", "groups")


class ChronikWithConsole(Chronik):
    def __init__(self, http_port: int) -> None:
        super().__init__()
        self.http_port = http_port

    def command(self) -> list[str]:
        return [*super().command(), "--http-listen", f"127.0.0.1:{self.http_port}",
                "--set", "log.segment.bytes=1048576"]

    def restart(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(60)
        self.start(120)


def _get(conn: http.client.HTTPConnection, path: str, cookie: str | None) -> tuple[Any, str]:
    headers = {"Cookie": cookie} if cookie else {}
    conn.request("GET", "/console/api/" + path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    set_cookie = response.getheader("Set-Cookie")
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
    return json.loads(body), (set_cookie.split(";")[0] if set_cookie else cookie or "")


def console_loop(port: int, mode: str, consoles: int, stop: Any, counts: Any) -> None:
    """``consoles`` sessions asking for the pages: every 3 s each (``page``) or back to
    back (``tight``), until ``stop``; the number of requests made goes to ``counts``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    cookies = []
    for _ in range(consoles):
        _, cookie = _get(conn, "session", None)
        cookies.append(cookie)
    made = 0
    latencies = []
    next_round = time.monotonic()
    while not stop.is_set():
        for cookie in cookies:
            for page in PAGES:
                started = time.monotonic()
                _get(conn, page, cookie)
                latencies.append(time.monotonic() - started)
                made += 1
        if mode == "page":
            next_round += 3.0
            stop.wait(max(0.0, next_round - time.monotonic()))
    counts.put({"requests": made,
                "page_p50_ms": statistics.median(latencies) * 1000 if latencies else 0.0,
                "page_max_ms": max(latencies) * 1000 if latencies else 0.0})


def populate(bootstrap: str, topics: int, partitions: int, groups: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"big-{i:03d}" for i in range(topics)]
    for start in range(0, topics, 10):
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names[start:start + 10]],
                                      request_timeout=120)
        for future in futures.values():
            future.result(300)
    futures = admin.create_topics([NewTopic("latency", 1, 1)])
    futures["latency"].result(60)
    pending = []
    for g in range(groups):
        offsets = [TopicPartition(names[g % topics], g % partitions, 0)]
        pending.append(admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"group-{g:04d}", offsets)], request_timeout=60))
        if len(pending) >= 50 or g == groups - 1:
            for fs in pending:
                for future in fs.values():
                    future.result(120)
            pending.clear()


def one_round(broker: Chronik, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    stop, counts = ctx.Event(), ctx.Queue()
    loop = None
    if mode != "none":
        consoles = args.consoles if mode == "page" else 1
        loop = ctx.Process(target=console_loop,
                           args=(broker.http_port, mode, consoles, stop, counts))
        loop.start()
        time.sleep(1.0)
    cpu0 = broker.cpu_seconds()
    try:
        result = produce_latency(broker.bootstrap, "latency", acks="1", record_size=100,
                                 rate=args.rate, seconds=args.seconds, warmup_records=20)
    finally:
        stop.set()
        extra: dict[str, Any] = {}
        if loop is not None:
            loop.join(120)
            extra = counts.get(timeout=10)
    cpu = broker.cpu_seconds() - cpu0
    return {"mode": mode, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms,
            "max_ms": result.max_ms, "samples": result.samples, "failed": result.failed,
            "broker_cpu_s": cpu, **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=200, help="records/s of the latency producer")
    parser.add_argument("--consoles", type=int, default=3,
                        help="sessions refreshing the pages in the page mode")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.partitions, args.groups = 10, 10, 50
        args.rounds, args.seconds = 1, 5.0
    broker = ChronikWithConsole(free_port())
    broker.start(60)
    rows: list[dict[str, Any]] = []
    try:
        started = time.monotonic()
        populate(broker.bootstrap, args.topics, args.partitions, args.groups)
        print(f"{args.topics * args.partitions} partitions and {args.groups} groups made in "
              f"{time.monotonic() - started:.0f} s", flush=True)
        # Measured on a broker that started with them, as a broker holding many
        # partitions runs after its first restart.
        broker.restart()
        for r in range(args.rounds):
            for mode in ("none", "page", "tight"):
                row = one_round(broker, mode, args)
                row["round"] = r
                rows.append(row)
                print(f"round {r} {mode:5}  p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:7.2f}"
                      f" ms  max {row['max_ms']:7.2f} ms  console requests "
                      f"{row.get('requests', 0)}", flush=True)
    finally:
        broker.stop()
    summary: dict[str, Any] = {}
    for mode in ("none", "page", "tight"):
        mine = [r for r in rows if r["mode"] == mode]
        summary[mode] = {"p50_ms": statistics.median(r["p50_ms"] for r in mine),
                         "p99_ms": statistics.median(r["p99_ms"] for r in mine)}
    for mode in ("page", "tight"):
        for q in ("p50_ms", "p99_ms"):
            summary[mode][f"{q[:3]}_ratio"] = round(summary[mode][q] / summary["none"][q], 2)
    print("\nmedian of rounds     p50 ms   p99 ms   ratio p50  ratio p99")
    for mode in ("none", "page", "tight"):
        s = summary[mode]
        print(f"{mode:18} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f}   "
              f"{s.get('p50_ratio', 1.0):8.2f}  {s.get('p99_ratio', 1.0):8.2f}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"console-load-{stamp}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps({"settings": vars(args), "rounds": rows, "summary": summary},
                              indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
