"""The broker's CPU per Produce request: pipelined raw Produce v9 requests of one 16 KB
batch (150 records of 100 bytes, Kafka's default batch.size), one partition, acks=1,
sent over one connection with a window of five in flight. No client library is in the
loop, so the figure is the broker's alone: user and system CPU seconds from
/proc/PID/stat divided by the requests answered.

    python bench/request_cpu.py [--baseline ../other-checkout] [--requests 20000]
        [--rounds 3] [--acks 1] [--calls] [--quick]

With --baseline the two checkouts' brokers run in turns, round by round, and the
ratio of their CPU per request is printed (a per-request cost that one revision added
shows here at a resolution a throughput bench cannot give on a loaded machine).

--calls adds one more run of each checkout with the broker under cProfile, switched
on (SIGUSR1) and off (SIGUSR2) around the measured requests only, and prints the Python
function calls per request and the functions called most: a count that, unlike CPU
time, other load on the machine does not move. --quick is a smoke run (1,000
requests, one round).
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import pstats
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import NewTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from brokers import CLOCK_TICKS, Chronik  # noqa: E402

from chronik.records.builder import Record, build_batch  # noqa: E402

TOPIC = "request-cpu"
WARMUP = 500
WINDOW = 5
# `python -c` with this: chronik's command line, its main thread profiled between
# SIGUSR1 and SIGUSR2 (the stats written to $REQUEST_CPU_PROFILE at SIGUSR2).
PROFILED = """
import cProfile, os, signal, sys
profiler = cProfile.Profile()
def _on(signum, frame):
    profiler.enable()
def _off(signum, frame):
    profiler.disable()
    profiler.dump_stats(os.environ["REQUEST_CPU_PROFILE"])
signal.signal(signal.SIGUSR1, _on)
signal.signal(signal.SIGUSR2, _off)
from chronik.cli.main import main
sys.argv[0] = "chronik"
raise SystemExit(main())
"""


class ProfiledChronik(Chronik):
    """chronik whose main thread can be profiled for a span (see PROFILED)."""

    def __init__(self, src: Path, stats: Path) -> None:
        super().__init__(src=src)
        self.stats = stats

    def command(self) -> list[str]:
        command = super().command()
        return [sys.executable, "-c", PROFILED, *command[3:]]

    def env(self) -> dict[str, str]:
        return {**super().env(), "REQUEST_CPU_PROFILE": str(self.stats)}


def produce_frame(correlation_id: int, batch: bytes, acks: int) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out,
        RequestHeader(
            request_api_key=i16(0),
            request_api_version=i16(9),
            correlation_id=i32(correlation_id),
            client_id="request-cpu",
        ),
    )
    entity_writer(ProduceRequest)(
        out,
        ProduceRequest(
            transactional_id=None,
            acks=i16(acks),
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                TopicProduceData(
                    name=TOPIC, partition_data=(PartitionProduceData(index=0, records=batch),)
                ),
            ),
        ),
    )
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def _recv_responses(sock: socket.socket, count: int) -> None:
    for _ in range(count):
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            head += chunk
        (left,) = struct.unpack(">i", head)
        while left:
            chunk = sock.recv(min(left, 65536))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            left -= len(chunk)


def _user_system(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def measure(src: Path, requests: int, acks: int, stats: Path | None = None) -> dict[str, float]:
    broker = Chronik(src=src) if stats is None else ProfiledChronik(src, stats)
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
        now = int(time.time() * 1000)
        batch = build_batch([Record(key=None, value=b"x" * 100, timestamp=now)] * 150)
        frames = [produce_frame(i, batch, acks) for i in range(requests + WARMUP)]
        assert broker.proc is not None
        with socket.create_connection(("127.0.0.1", broker.port)) as sock:
            for frame in frames[:WARMUP]:
                sock.sendall(frame)
            _recv_responses(sock, WARMUP)
            if stats is not None:
                os.kill(broker.proc.pid, signal.SIGUSR1)
                time.sleep(0.2)  # the signal is handled between two bytecodes
            user0, system0 = _user_system(broker.proc.pid)
            started = time.perf_counter()
            in_flight = 0
            for frame in frames[WARMUP:]:
                sock.sendall(frame)
                in_flight += 1
                if in_flight >= WINDOW:
                    _recv_responses(sock, 1)
                    in_flight -= 1
            _recv_responses(sock, in_flight)
            elapsed = time.perf_counter() - started
            user1, system1 = _user_system(broker.proc.pid)
            if stats is not None:
                os.kill(broker.proc.pid, signal.SIGUSR2)
                deadline = time.monotonic() + 30
                while not stats.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(0.5)  # written whole
        return {
            "user_us": (user1 - user0) / requests * 1e6,
            "system_us": (system1 - system0) / requests * 1e6,
            "requests_per_s": requests / elapsed,
        }
    finally:
        broker.stop()


def calls_per_request(stats: Path, requests: int, top: int) -> tuple[float, list[str]]:
    entries = pstats.Stats(str(stats)).stats  # type: ignore[attr-defined]
    total = sum(primitive for _, primitive, _, _, _ in entries.values())
    busiest = sorted(entries.items(), key=lambda item: -item[1][1])[:top]
    lines = [
        f"    {calls / requests:6.1f}  {Path(path).name}:{line} {name}"
        for (path, line, name), (_, calls, _, _, _) in busiest
    ]
    return total / requests, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    parser.add_argument(
        "--calls", action="store_true", help="also count Python calls per request (cProfile)"
    )
    parser.add_argument("--top", type=int, default=25, help="functions listed with --calls")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000 requests, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 1_000, 1
    if args.acks == 0:
        parser.error("acks=0 gets no responses to pace the window by")
    trees = {"this": Path(__file__).resolve().parent.parent / "src"}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve() / "src"
    totals: dict[str, list[float]] = {name: [] for name in trees}
    for round_no in range(args.rounds):
        order = list(trees.items())
        if round_no % 2:
            order.reverse()
        for name, src in order:
            m = measure(src, args.requests, args.acks)
            total = m["user_us"] + m["system_us"]
            totals[name].append(total)
            print(
                f"round {round_no + 1} {name:8s} CPU/request {total:6.1f} us "
                f"(user {m['user_us']:.1f}, system {m['system_us']:.1f}), "
                f"{m['requests_per_s']:,.0f} requests/s",
                flush=True,
            )
    for name, values in totals.items():
        print(f"{name:8s} best CPU/request {min(values):.1f} us")
    if args.baseline is not None:
        print(f"this/baseline CPU per request: {min(totals['this']) / min(totals['baseline']):.2f}")
    if args.calls:
        with tempfile.TemporaryDirectory(prefix="request-cpu-") as tmp:
            for name, src in trees.items():
                stats = Path(tmp) / f"{name}.prof"
                measure(src, args.requests, args.acks, stats)
                per_request, lines = calls_per_request(stats, args.requests, args.top)
                print(f"{name:8s} Python calls per request {per_request:.1f}; most called:")
                print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
