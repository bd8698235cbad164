"""The broker's CPU per Produce request: pipelined raw Produce v9 requests of one 16 KB
batch (150 records of 100 bytes, Kafka's default batch.size), one partition, acks=1,
sent over one connection with a window of five in flight. No client library is in the
loop, so the figure is the broker's alone: user and system CPU seconds from
/proc/PID/stat divided by the requests answered.

    python bench/request_cpu.py [--baseline ../other-checkout] [--requests 20000]
        [--rounds 3] [--acks 1]

With --baseline the two checkouts' brokers run in turns, round by round, and the
ratio of their CPU per request is printed (a per-request cost that one revision added
shows here at a resolution a throughput bench cannot give on a loaded machine).
"""

from __future__ import annotations

import argparse
import datetime
import io
import socket
import struct
import sys
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


def measure(src: Path, requests: int, acks: int) -> dict[str, float]:
    broker = Chronik(src=src)
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
        return {
            "user_us": (user1 - user0) / requests * 1e6,
            "system_us": (system1 - system0) / requests * 1e6,
            "requests_per_s": requests / elapsed,
        }
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", type=int, default=1, choices=(0, 1, -1))
    args = parser.parse_args()
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
