"""A follower rejoining the ISR under load: each ISR change a leader makes is logged once
(not lost, not repeated), and a change that changes nothing is not logged at all (no
`ISR [2, 1, 3] -> [2, 1, 3]`, no `ISR [1, 2] -> [1, 2, 3]` over and over for one
partition)."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from .cluster_support import Cluster, wait_until

pytestmark = pytest.mark.slow

TOPIC = "isr-log"
# Few enough that every broker leads at most five: a line naming the partitions of a
# change names all of them.
PARTITIONS = 9
REJOINING = 3

# "t-0: ISR [1, 2] -> [1, 2, 3]", or "ISR [1, 2] -> [1, 2, 3] for 2 partitions (t-0, t-1)".
_CHANGE = re.compile(
    r"(?:(?P<name>[\w.-]+-\d+): )?ISR (?P<old>\[[\d, ]*\]) -> (?P<new>\[[\d, ]*\])"
    r"(?: for \d+ partitions \((?P<names>[^)]*)\))?"
)


_MORE = re.compile(r" and \d+ more$")


def _changes(text: str) -> tuple[list[tuple[str, str, str]], bool]:
    """(partition, old ISR, new ISR) of every ISR change a log states, in order, and
    whether some line named only some of its partitions."""
    out = []
    partial = False
    for line in text.splitlines():
        m = _CHANGE.search(line)
        if m is None:
            continue
        names = [m["name"]] if m["name"] else [
            n.strip() for n in (m["names"] or "").split(",") if n.strip()
        ]
        if names and _MORE.search(names[-1]):
            partial = True
            names[-1] = _MORE.sub("", names[-1])
        for name in names:
            out.append((name, m["old"], m["new"]))
    return out, partial


def _members(isr: str) -> set[int]:
    return {int(b) for b in isr.strip("[]").split(",") if b.strip()}


def _isr(cluster: Cluster, partition: int) -> list[int]:
    return cluster.partition_state(TOPIC, partition)["isr"]


def test_each_isr_change_is_logged_once_when_a_follower_rejoins(zookeeper, tmp_path):
    cluster = Cluster(tmp_path / "cluster", zookeeper.connect, 3)
    stop = threading.Event()
    try:
        cluster.start()
        admin = cluster.admin(1)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30)[TOPIC].result()
        cluster.wait_topic(TOPIC, PARTITIONS)
        bootstrap = ",".join(cluster.broker(i).bootstrap for i in cluster.ids if i != REJOINING)

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "1",
                                 "linger.ms": 5})
            n = 0
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, key=str(n).encode(), value=b"x" * 200)
                    n += 1
                except BufferError:
                    producer.poll(0.05)
                producer.poll(0)
            producer.flush(10)

        load = threading.Thread(target=produce, daemon=True)
        load.start()
        assert cluster.stop(REJOINING) == 0
        for p in range(PARTITIONS):
            wait_until(lambda p=p: REJOINING not in _isr(cluster, p),
                       f"broker {REJOINING} out of the ISR of {TOPIC}-{p}")
        marks = {i: len(cluster.log_text(i)) for i in cluster.ids}
        cluster.start(REJOINING)
        for p in range(PARTITIONS):
            wait_until(lambda p=p: REJOINING in _isr(cluster, p),
                       f"broker {REJOINING} back in the ISR of {TOPIC}-{p}")
        # The leaders' last writes answered, and any line that gathers changes written.
        time.sleep(3.0)
        stop.set()
        load.join(20)

        problems = []
        rejoined: set[str] = set()
        every_name = True
        for i in cluster.ids:
            logged: dict[str, list[tuple[str, str]]] = defaultdict(list)
            changes, partial = _changes(cluster.log_text(i)[marks[i]:])
            every_name = every_name and not partial
            for name, old, new in changes:
                if _members(old) == _members(new):
                    problems.append(f"broker {i}: {name}: ISR {old} -> {new} changes nothing")
                elif logged[name] and logged[name][-1] == (old, new):
                    problems.append(f"broker {i}: {name}: ISR {old} -> {new} logged again")
                logged[name].append((old, new))
                if REJOINING in _members(new) - _members(old):
                    rejoined.add(name)
        if every_name:
            # Every partition's ISR took the follower back (ZooKeeper says so): its leader
            # said so too.
            missing = {f"{TOPIC}-{p}" for p in range(PARTITIONS)} - rejoined
            problems += [f"{name}: broker {REJOINING} rejoining its ISR was not logged"
                         for name in sorted(missing)]
        assert not problems, "\n".join(problems[:20])
    finally:
        stop.set()
        cluster.close()
