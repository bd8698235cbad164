"""What an fsync costs on this disk: the floor under acks=all latency.

    python bench/fsync_probe.py [--dir DIR] [--rate 2000] [--seconds 3] [--quick]

Appends 1,100-byte writes to a file in DIR (default: a temporary directory under
bench/results, the disk the benches' brokers write to) and times fdatasync two ways:
one after another (each append then its fdatasync, alone), and at a fixed append rate
with each append's fdatasync started on a thread at once, beside those still in flight
(what chronik's group commit does while appends are sparse). Then how long the appends'
own write() calls block while fsyncs run (the broker writes on its event loop, so a
blocked write holds every request): 16 KB appends every 0.3 ms, fsyncs kept in flight
one at a time (the old group commit) against up to four at once. Prints percentiles.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RECORD = b"x" * 1100


def percentiles(samples: list[float]) -> str:
    s = sorted(samples)
    n = len(s)
    if not n:
        return "no samples"
    return (f"p50 {s[n // 2] * 1e3:.2f}  p90 {s[int(n * 0.9)] * 1e3:.2f}  "
            f"p99 {s[min(n - 1, int(n * 0.99))] * 1e3:.2f} ms  ({n} fsyncs)")


def one_at_a_time(fd: int, count: int) -> list[float]:
    out = []
    for _ in range(count):
        os.write(fd, RECORD)
        started = time.perf_counter()
        os.fdatasync(fd)
        out.append(time.perf_counter() - started)
    return out


def overlapping(fd: int, rate: int, seconds: float) -> list[float]:
    """Append at ``rate``/s; each append's fdatasync starts at once on a worker thread
    (at most 4 in flight, as the group commit); the time from append to its return."""
    out: list[float] = []
    lock = threading.Lock()
    slots = threading.Semaphore(4)

    def sync(appended: float) -> None:
        try:
            os.fdatasync(fd)
        finally:
            slots.release()
        with lock:
            out.append(time.perf_counter() - appended)

    with ThreadPoolExecutor(8) as pool:
        interval = 1.0 / rate
        due = time.perf_counter()
        for _ in range(int(rate * seconds)):
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            os.write(fd, RECORD)
            appended = time.perf_counter()
            slots.acquire()
            pool.submit(sync, appended)
            due += interval
    return out


def writes_beside_fsyncs(fd: int, in_flight: int, count: int) -> str:
    """write() latency of 16 KB appends while fdatasyncs run, ``in_flight`` at most."""
    data = b"x" * 16384
    lock = threading.Lock()
    running = [0]
    fsyncs = 0
    blocked: list[float] = []

    def sync() -> None:
        os.fdatasync(fd)
        with lock:
            running[0] -= 1

    with ThreadPoolExecutor(8) as pool:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, data)
            blocked.append(time.perf_counter() - started)
            with lock:
                start = running[0] < in_flight
                if start:
                    running[0] += 1
            if start:
                fsyncs += 1
                pool.submit(sync)
            time.sleep(0.0003)
    s = sorted(blocked)
    return (f"write() p50 {s[len(s) // 2] * 1e6:.0f} us, p99 "
            f"{s[int(len(s) * 0.99)] * 1e6:.0f} us, mean {sum(s) / len(s) * 1e6:.0f} us "
            f"({fsyncs} fsyncs)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where to write (default: under bench/results)")
    parser.add_argument("--rate", type=int, default=2000, help="appends/s, overlapping run")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="a fraction of a second each")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 0.25
    base = args.dir or Path(__file__).resolve().parent / "results"
    base.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="fsync-probe-", dir=base))
    print(f"load {os.getloadavg()}  dir {workdir}")
    try:
        fd = os.open(workdir / "probe.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            count = max(int(args.rate * args.seconds / 4), 20)
            print(f"fdatasync, one at a time:        {percentiles(one_at_a_time(fd, count))}")
            print(f"fdatasync per append @ {args.rate}/s: "
                  f"{percentiles(overlapping(fd, args.rate, args.seconds))}")
            writes = max(int(args.seconds * 1000), 200)
            for in_flight in (1, 4, 1, 4):
                print(f"appends beside fsyncs, {in_flight} in flight: "
                      f"{writes_beside_fsyncs(fd, in_flight, writes)}")
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
