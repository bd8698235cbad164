"""How long a consumer-group rebalance takes, chronik beside Tansu in one run.

    python bench/rebalance_bench.py              # 5 runs per scenario, about a minute or two
    python bench/rebalance_bench.py --runs 3 --brokers chronik

Three confluent-kafka consumers (heartbeat.interval.ms=100, the range assignor) on a
6-partition topic, each polling in its own thread. Scenarios, each timed until the members
that should be in the group hold a disjoint cover of all six partitions:

- join:  three members subscribe to a new group at once (includes client start-up, metadata
         and the broker's group.initial.rebalance.delay.ms: 300 ms on chronik, 3 s in Kafka);
- grow:  a fourth member joins the stable group of three;
- leave: that member closes (LeaveGroup) and the other three take its partitions back.

Medians go to stdout and bench/results/rebalance.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from brokers import BROKERS  # noqa: E402

PARTITIONS = 6
GIVE_UP_S = 30.0


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str):
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 100, "session.timeout.ms": 6000,
            "partition.assignment.strategy": "range", "enable.auto.commit": False,
        })
        self.assigned: frozenset[int] = frozenset()
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_assign(self, _consumer, parts) -> None:
        self.assigned = frozenset(p.partition for p in parts)

    def _on_revoke(self, _consumer, _parts) -> None:
        self.assigned = frozenset()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.02)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.consumer.close()


def _covered(members: list[Member]) -> bool:
    sets = [m.assigned for m in members]
    joined = [p for s in sets for p in s]
    return all(sets) and len(joined) == PARTITIONS and set(joined) == set(range(PARTITIONS))


def _until_covered(members: list[Member], since: float) -> float:
    while time.perf_counter() - since < GIVE_UP_S:
        if _covered(members):
            return time.perf_counter() - since
        time.sleep(0.002)
    return float("inf")


def one_run(bootstrap: str, topic: str) -> dict[str, float]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    members = [Member(bootstrap, group, topic) for _ in range(3)]
    out = {"join": _until_covered(members, start)}
    try:
        start = time.perf_counter()
        members.append(Member(bootstrap, group, topic))
        out["grow"] = _until_covered(members, start)
        leaving = members.pop()
        start = time.perf_counter()
        leaving.close()
        out["leave"] = _until_covered(members, start)
    finally:
        for m in members:
            m.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--brokers", default="chronik,tansu")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for name in args.brokers.split(","):
        broker = BROKERS[name]()
        broker.start()
        try:
            topic = f"rebalance-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
                f.result(30)
            runs = [one_run(broker.bootstrap, topic) for _ in range(args.runs)]
            results[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{name}: " + ", ".join(
                f"{k} {', '.join(f'{r[k] * 1000:.0f}' for r in runs)} ms" for k in runs[0]
            ), flush=True)
        finally:
            broker.stop()
    print()
    names = list(results)
    print("| scenario (median ms) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for scenario in ("join", "grow", "leave"):
        cells = [f"{results[n][scenario] * 1000:,.0f}" if results[n][scenario] != float("inf")
                 else f"> {GIVE_UP_S:.0f} s" for n in names]
        print(f"| {scenario} | " + " | ".join(cells) + " |")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "rebalance.json").write_text(json.dumps(
        {"runs": args.runs, "median_s": {
            n: {k: (v if v != float("inf") else None) for k, v in r.items()}
            for n, r in results.items()
        }}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
