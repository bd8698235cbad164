"""Sample chronik's broker with py-spy while the bench's produce and fetch workloads run.

    python bench/profile_broker.py [--seconds 8] [--out bench/results/profile]
        [--only produce-1p-acks-1-16k] [--src ../other-checkout/src] [--lines]

For each workload it writes py-spy's collapsed stacks (load them in
speedscope.app or flamegraph.pl for a flame graph) and prints the functions
holding the most broker samples, by self time and including callees. Idle
samples (the event loop blocked on sockets) are left out, so the percentages
are shares of the broker's busy time.
Needs py-spy (`pip install py-spy`) and permission to ptrace the broker.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import Chronik  # noqa: E402
from workloads import consume_throughput, create_topic, produce_throughput  # noqa: E402

SMALL_BATCHES = {"batch.size": 16_384, "linger.ms": 0}
# (name, partitions, acks, producer batching); "consume" profiles reading back
# a topic filled (unprofiled) with the 1 MB-batch settings.
WORKLOADS = [
    ("produce-1p-acks-1", 1, "1", {}),
    ("produce-1p-acks-all", 1, "all", {}),
    ("produce-1p-acks-1-16k", 1, "1", SMALL_BATCHES),
    ("produce-6p-acks-all-16k", 6, "all", SMALL_BATCHES),
    ("consume-1p", 1, "1", {}),
    ("consume-6p", 6, "1", {}),
]


def produce(bootstrap: str, topic: str, partitions: int, acks: str, batching: dict, seconds: float):
    create_topic(bootstrap, topic, partitions)
    return produce_throughput(
        bootstrap,
        topic,
        acks=acks,
        record_size=100,
        seconds=seconds,
        max_records=5_000_000,
        warmup_records=10_000,
        batching=batching,
    )


def top(collapsed: Path, limit: int) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "  (no busy samples)"
    out = [f"  {total} busy samples"]
    for title, counter in (("self", own), ("including callees", inclusive)):
        out.append(f"  top by {title}:")
        out.extend(f"    {n / total:6.1%}  {frame}" for frame, n in counter.most_common(limit))
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "profile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument(
        "--lines", action="store_true", help="samples by source line, not by function"
    )
    parser.add_argument("--only", help="profile only the workloads whose name contains this")
    parser.add_argument(
        "--src", type=Path, help="another checkout's src/ to profile instead of this one's"
    )
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args.out.mkdir(parents=True, exist_ok=True)

    broker = Chronik(src=args.src.resolve()) if args.src else Chronik()
    broker.start()
    try:
        for name, partitions, acks, batching in WORKLOADS:
            if args.only and args.only not in name:
                continue
            topic = f"profile-{name}"
            if name.startswith("consume"):
                filled = produce(broker.bootstrap, topic, partitions, acks, batching, args.seconds)
                expected = filled.records + filled.warmup_records

                def measured(topic=topic, partitions=partitions, expected=expected) -> object:
                    return consume_throughput(broker.bootstrap, topic, partitions, expected)
            else:

                def measured(
                    topic=topic, partitions=partitions, acks=acks, batching=batching
                ) -> object:
                    return produce(
                        broker.bootstrap, topic, partitions, acks, batching, args.seconds
                    )

            collapsed = args.out / f"{name}.txt"
            spy = subprocess.Popen(
                [py_spy, "record", "--pid", str(broker.proc.pid), "--rate", str(args.rate)]
                + ([] if args.lines else ["--function"])
                + ["--format", "raw", "--output", str(collapsed), "--nonblocking"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(1.0)  # let py-spy attach before the load starts
            result = measured()
            spy.send_signal(signal.SIGINT)
            _, err = spy.communicate(timeout=60)
            rate = getattr(result, "records_per_s", 0.0)
            print(f"{name}: {rate:,.0f} records/s  ({collapsed})", flush=True)
            if collapsed.exists():
                print(top(collapsed, args.top), flush=True)
            else:
                print(f"  py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
