"""What the event store gives and costs on one chronik broker, side by side in one run:

(a) reading one key's events through the HTTP API (``GET .../keys/{key}/events``, served
    from the per-key index) against finding them the Kafka way, a consumer scanning the
    key's partition from its start, over a topic of --keys keys x --events-per-key
    events (default 1,000,000 x 10 = 10M records, the issue's size);
(b) conditional appends (every record carrying ``chronik-expected-version``, many keys,
    pipelined) on a topic with key.versioning.enable against plain produce on a topic
    without it: the same confluent-kafka producer settings (acks=all, idempotent,
    linger.ms=5, 1 MB batches, murmur2 partitioner) and the same keys and values.

    python bench/eventstore_bench.py            # loads 10M records first (see docs/bench.md)
    python bench/eventstore_bench.py --quick    # smoke run, a few seconds
    python bench/eventstore_bench.py --profile  # also py-spy the broker during (b)

The load is timed and reported. Reads: --http-samples random keys over one keep-alive
HTTP connection (latency per request, JSON parsed, every event counted); --scan-samples
random keys scanned by one consumer re-assigned to the key's partition at its low
watermark and reading to the high watermark (latency per key, the watermark query
included; connections made beforehand). A few keys are checked to give the same offsets both ways.
Appends: best of --runs, alternating which topic goes first. Prints a table and writes
JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_bench import chronik_revision, machine  # noqa: E402
from brokers import Chronik, free_port  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
VALUE_SIZE = 100
EXPECTED = "chronik-expected-version"


class ChronikHttp(Chronik):
    """`chronik serve` with its HTTP API on a second free port."""

    def __init__(self) -> None:
        super().__init__()
        self.http_port = free_port()

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def command(self) -> list[str]:
        return [*super().command(), "--http-listen", f"127.0.0.1:{self.http_port}"]


def create(bootstrap: str, name: str, partitions: int, versioned: bool) -> None:
    config = {"key.versioning.enable": "true"} if versioned else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(60)


def key_of(n: int) -> bytes:
    return b"acct-%07d" % n


def value_of(key: bytes, version: int) -> bytes:
    body = b'{"account":"%s","version":%d,"pad":"' % (key, version)
    return body + b"x" * (VALUE_SIZE - len(body) - 2) + b'"}'


def producer(bootstrap: str, **extra: object) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
        "partitioner": "murmur2_random", "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": 600_000, **extra,
    })


def produce_all(p: Producer, topic: str, keys: int, per_key: int, expected: bool) -> dict:
    """Every key's events, version by version across all keys (so a batch holds many keys
    and each key's appends are pipelined in order); with ``expected`` each record carries
    its expected version. Returns records/s and the failures the delivery reports gave."""
    failed: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))

    start = time.perf_counter()
    for version in range(per_key):
        headers = [(EXPECTED, b"%d" % version)] if expected else None
        for n in range(keys):
            key = key_of(n)
            while True:
                try:
                    p.produce(topic, key=key, value=value_of(key, version), headers=headers,
                              on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    left = p.flush(1800)
    elapsed = time.perf_counter() - start
    count = keys * per_key
    if left or failed:
        raise RuntimeError(f"{topic}: {left} undelivered, {len(failed)} failed: {failed[:3]}")
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed}


def warmed(bootstrap: str, topic: str, expected: bool) -> Producer:
    """A producer that has sent to ``topic`` already (its connection, metadata and
    producer id in place), so the timed run measures appends, not a producer's start."""
    p = producer(bootstrap)
    headers = [(EXPECTED, b"0")] if expected else None
    for partition in range(len(p.list_topics(topic, timeout=30).topics[topic].partitions)):
        # Expected version 0 holds in each: every partition numbers its keys apart.
        p.produce(topic, key=b"warm-up", value=b"", headers=headers, partition=partition)
    if p.flush(60):
        raise RuntimeError(f"{topic}: the warm-up record was not delivered")
    return p


class Http:
    """One keep-alive connection to the broker's HTTP API."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def get(self, path: str) -> dict:
        for attempt in range(2):
            try:
                self.conn.request("GET", path)
                resp = self.conn.getresponse()
                body = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                if attempt:
                    raise
                self.conn.close()  # the server closed it: reconnect once
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
        return json.loads(body)

    def events(self, topic: str, key: bytes) -> dict:
        return self.get(f"/v1/topics/{quote(topic)}/keys/{quote(key)}/events"
                        "?from_version=0&limit=100")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def http_reads(url: str, topic: str, keys: list[bytes], per_key: int) -> tuple[list, dict]:
    client = Http(url)
    client.events(topic, keys[0])  # connect
    latencies, partitions = [], {}
    for key in keys:
        start = time.perf_counter()
        answer = client.events(topic, key)
        latencies.append(time.perf_counter() - start)
        if len(answer["events"]) != per_key:
            raise RuntimeError(f"{key!r}: {len(answer['events'])} events, not {per_key}")
        partitions[key] = (answer["partition"], [e["offset"] for e in answer["events"]])
    return latencies, partitions


def scans(bootstrap: str, topic: str, located: dict) -> tuple[list, dict]:
    """Per key: assign its partition at the low watermark, read to the high watermark and
    keep the key's records."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"scan-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False, "enable.partition.eof": False,
        "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 262_144,
        "fetch.queue.backoff.ms": 5,
        # No long-poll: the next key's first Fetch would wait behind the last one's.
        "fetch.wait.max.ms": 5,
    })
    # Watermarks from a client of their own: on the scanning consumer's connection the
    # query would queue behind its last long-poll Fetch (fetch.wait.max.ms).
    marks = Consumer({"bootstrap.servers": bootstrap, "group.id": "scan-marks"})
    consumer.list_topics(topic, timeout=30)  # connected before the clock starts
    marks.list_topics(topic, timeout=30)
    latencies, found = [], {}
    for key, (partition, _) in located.items():
        start = time.perf_counter()
        low, high = marks.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, low)])
        offsets, last = [], low - 1
        while last < high - 1:
            # Ask for no more than is left, so the last call does not wait out its timeout.
            for msg in consumer.consume(min(10_000, high - 1 - last), 1.0):
                if msg.error() is None:
                    last = msg.offset()
                    if msg.key() == key:
                        offsets.append(msg.offset())
        latencies.append(time.perf_counter() - start)
        consumer.unassign()
        found[key] = offsets
    consumer.close()
    marks.close()
    return latencies, found


def py_spy_start(pid: int, out: Path) -> subprocess.Popen:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--rate", "250", "--function", "--format", "raw",
         "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # attached before the load starts
    return spy


def py_spy_stop(spy: subprocess.Popen, out: Path) -> str:
    from profile_broker import top

    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=120)
    if not out.exists():
        return f"  py-spy wrote nothing: {err.decode(errors='replace')[-500:]}"
    return top(out, 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--events-per-key", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--load-batch-bytes", type=int, default=1_000_000,
                        help="the load's batch.size (a read decodes each batch holding one "
                        "of the key's events)")
    parser.add_argument("--http-samples", type=int)
    parser.add_argument("--scan-samples", type=int)
    parser.add_argument("--append-keys", type=int)
    parser.add_argument("--append-per-key", type=int, default=10)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--profile", action="store_true", help="py-spy the broker during (b)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    keys = args.keys or (2_000 if args.quick else 1_000_000)
    http_samples = args.http_samples or (200 if args.quick else 2_000)
    scan_samples = args.scan_samples or (3 if args.quick else 20)
    append_keys = args.append_keys or (2_000 if args.quick else 20_000)
    runs = args.runs or (1 if args.quick else 2)
    per_key = args.events_per_key

    broker = ChronikHttp()
    broker.start()
    report: dict = {"mode": "quick" if args.quick else "full"}
    try:
        # (a) reads
        topic = f"events-{uuid.uuid4().hex[:6]}"
        create(broker.bootstrap, topic, args.partitions, versioned=True)
        print(f"loading {keys * per_key:,} records ({keys:,} keys x {per_key}) ...", flush=True)
        loader = producer(broker.bootstrap, **{"linger.ms": 50,
                                               "batch.size": args.load_batch_bytes})
        load = produce_all(loader, topic, keys, per_key, expected=False)
        print(f"loaded in {load['seconds']:.0f} s ({load['records_per_s']:,.0f} records/s)",
              flush=True)
        rng = random.Random(13)
        sample = [key_of(rng.randrange(keys)) for _ in range(http_samples)]
        http_lat, located = http_reads(broker.http_url, topic, sample, per_key)
        scanned = dict(list(located.items())[:scan_samples])
        scan_lat, found = scans(broker.bootstrap, topic, scanned)
        for key, offsets in found.items():
            if offsets != located[key][1]:
                raise RuntimeError(f"{key!r}: the scan found {offsets}, HTTP {located[key][1]}")
        reads = {
            "http_p50_ms": percentile(http_lat, 0.5) * 1e3,
            "http_p99_ms": percentile(http_lat, 0.99) * 1e3,
            "scan_p50_ms": percentile(scan_lat, 0.5) * 1e3,
            "scan_p99_ms": percentile(scan_lat, 0.99) * 1e3,
            "http_samples": len(http_lat), "scan_samples": len(scan_lat),
            "partition_records": keys * per_key // args.partitions,
        }
        reads["scan_over_http_p50"] = reads["scan_p50_ms"] / reads["http_p50_ms"]
        reads["scan_over_http_p99"] = reads["scan_p99_ms"] / reads["http_p99_ms"]

        # (b) appends
        best: dict[str, float] = {"plain": 0.0, "conditional": 0.0}
        profile = None
        for run in range(runs):
            order = ["plain", "conditional"] if run % 2 == 0 else ["conditional", "plain"]
            for kind in order:
                name = f"{kind}-{uuid.uuid4().hex[:6]}"
                create(broker.bootstrap, name, args.partitions, versioned=kind == "conditional")
                spy = None
                if args.profile and kind == "conditional" and profile is None:
                    out = RESULTS_DIR / "profile" / "eventstore-conditional-append.txt"
                    spy = py_spy_start(broker.proc.pid, out)
                conditional = kind == "conditional"
                got = produce_all(warmed(broker.bootstrap, name, conditional), name,
                                  append_keys, args.append_per_key, expected=conditional)
                if spy is not None:
                    profile = py_spy_stop(spy, out)
                best[kind] = max(best[kind], got["records_per_s"])
        appends = {"plain_records_per_s": best["plain"],
                   "conditional_records_per_s": best["conditional"],
                   "conditional_over_plain": best["conditional"] / best["plain"],
                   "records": append_keys * args.append_per_key, "keys": append_keys,
                   "runs": runs}
    finally:
        broker.stop()

    print(f"\n(a) one key's {per_key} events, {keys * per_key:,} records over {keys:,} keys, "
          f"{args.partitions} partitions (~{reads['partition_records']:,} records each)")
    print(f"{'':36}{'p50 ms':>10}{'p99 ms':>10}")
    http_row = f"HTTP read by key ({reads['http_samples']} keys)"
    scan_row = f"consumer scan ({reads['scan_samples']} keys)"
    print(f"{http_row:36}"
          f"{reads['http_p50_ms']:>10.2f}{reads['http_p99_ms']:>10.2f}")
    print(f"{scan_row:36}"
          f"{reads['scan_p50_ms']:>10.1f}{reads['scan_p99_ms']:>10.1f}")
    print(f"{'scan / HTTP':36}{reads['scan_over_http_p50']:>9.0f}x"
          f"{reads['scan_over_http_p99']:>9.0f}x")
    print(f"load: {load['seconds']:.1f} s, {load['records_per_s']:,.0f} records/s, "
          f"batch.size {args.load_batch_bytes:,}")
    print(f"\n(b) {appends['records']:,} appends of {VALUE_SIZE} B over {append_keys:,} keys, "
          f"best of {runs}")
    print(f"{'plain produce, acks=all':36}{appends['plain_records_per_s']:>12,.0f} records/s")
    print(f"{'conditional append':36}{appends['conditional_records_per_s']:>12,.0f} records/s"
          f"   {appends['conditional_over_plain']:.2f}x")
    if profile:
        print(f"\nbroker profile during the conditional appends:\n{profile}")
    report.update({
        "keys": keys, "events_per_key": per_key, "partitions": args.partitions,
        "load_batch_bytes": args.load_batch_bytes,
        "load": load, "reads": reads, "appends": appends,
        "machine": machine(), "chronik": chronik_revision(),
    })
    output = args.output or RESULTS_DIR / f"eventstore-{time.strftime('%Y%m%dT%H%M%S')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
