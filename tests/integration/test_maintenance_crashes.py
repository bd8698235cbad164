"""A seeded random schedule of produce, compaction, retention, DeleteRecords, topic
delete/recreate and kill -9 against a real `chronik serve`, checked against a model of
what was acknowledged after every restart.

Four topics of small segments: ``squash`` (cleanup.policy=compact, compacted whenever a
segment rolls), ``window`` (cleanup.policy=delete, retention.bytes=4096, so retention
drops segments every 100 ms), ``blend`` (compact,delete, tombstones dropped at once) and
``phoenix`` (deleted and recreated under the same name).
Each round starts the broker, checks the model, then runs random operations until the
broker is killed at a random moment (now and then a SIGTERM instead, after which no
temporary file may remain, or a kill -9 while it shuts down). An operation in flight at
the kill may or may not have happened, and the model allows both; a record seen after a
restart is from then on held to its offset like an acknowledged one.

CRASH_SEED and CRASH_ROUNDS run other or longer schedules (docs/storage.md).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.conftest import BrokerProcess

from chronik.records.reader import iter_batches, iter_records

from .helpers import fetch_request
from .rawclient import RawClient

SEED = int(os.environ.get("CRASH_SEED", "14"))
ROUNDS = int(os.environ.get("CRASH_ROUNDS", "8"))

BROKER = {"log.retention.check.interval.ms": "100"}
SMALL = {"segment.bytes": "1024"}
TOPICS = {
    "squash": {
        **SMALL,
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "86400000",  # tombstones stay: they are the latest value
    },
    "window": {**SMALL, "cleanup.policy": "delete", "retention.bytes": "4096"},
    "blend": {
        **SMALL,
        "cleanup.policy": "compact,delete",
        "retention.bytes": "8192",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "0",  # a pass drops the tombstones it reaches
    },
    "phoenix": dict(SMALL),
}
KEYS = 40
TOMBSTONES = {"squash": 0.05, "blend": 0.25}  # the share of records that are tombstones
TEMPORARY = (".cleaned", ".swap", ".tmp")
UNKNOWN_TOPIC = 3
OFFSET_OUT_OF_RANGE = 1
# How a round ends.
SIGTERM, KILL, TERM_KILL = "SIGTERM", "kill -9", "kill -9 during shutdown"

Pair = tuple[bytes, bytes | None]


class Killed(Exception):
    """The broker was killed while the operation was in flight."""


@dataclass
class Log:
    """What one topic incarnation must hold."""

    topic: str
    incarnation: int = 0
    # offset -> (key, value): acknowledged, or seen after a restart
    known: dict[int, Pair] = field(default_factory=dict)
    # sent, outcome unknown (in flight at the kill, or failed)
    maybe: Counter[Pair] = field(default_factory=Counter)  # tombstones repeat
    # the log start offset may not go below this (DeleteRecords acknowledged, or seen)
    floor: int = 0
    # targets of DeleteRecords in flight at the kill
    cuts_in_flight: list[int] = field(default_factory=list)

    @property
    def compacted(self) -> bool:
        return "compact" in TOPICS[self.topic].get("cleanup.policy", "")

    @property
    def retained(self) -> bool:
        return "retention.bytes" in TOPICS[self.topic]

    @property
    def drops_tombstones(self) -> bool:
        return TOPICS[self.topic].get("delete.retention.ms") == "0"

    @property
    def retention_bytes(self) -> int:
        return int(TOPICS[self.topic]["retention.bytes"])

    @property
    def end(self) -> int:
        return max(self.known, default=self.floor - 1) + 1


@dataclass
class Seen:
    start: int  # log start offset
    high: int  # high watermark
    records: dict[int, Pair]  # by offset, from the log start
    batch_bytes: dict[int, int]  # size of each batch, by base offset


def read_partition(raw: RawClient, topic: str) -> Seen | None:
    """Partition 0 as fetched raw from its log start; None if the topic does not exist."""
    offset, records, sizes = 0, {}, {}
    start = high = 0
    while True:
        request = fetch_request(topic, 0, offset, 1 << 20)
        (part,) = raw.request(request).responses[0].partitions
        code = int(part.error_code)
        if code == UNKNOWN_TOPIC:
            return None
        if code == OFFSET_OUT_OF_RANGE and offset < int(part.log_start_offset):
            offset = int(part.log_start_offset)  # retention moved it meanwhile
            records = {o: r for o, r in records.items() if o >= offset}
            sizes.clear()
            continue
        assert code == 0, f"{topic}: fetch at {offset} answered error {code}"
        start, high = int(part.log_start_offset), int(part.high_watermark)
        data = bytes(part.records or b"")
        last = offset - 1
        for pos, header in iter_batches(data):
            batch = data[pos : pos + header.size]
            for r in iter_records(batch):
                if r.offset >= offset:
                    records[r.offset] = (r.key, r.value)
            last = header.base_offset + header.last_offset_delta
            sizes[header.base_offset] = header.size
        if last < offset or last + 1 >= high:
            records = {o: r for o, r in records.items() if o >= start}
            return Seen(start, high, records, {b: n for b, n in sizes.items() if b >= start})
        offset = last + 1


def check(log: Log, seen: Seen, after: str) -> list[str]:
    """Compare what a partition holds after a restart with the model; then hold the model
    to what was seen."""
    start, high, records = seen.start, seen.high, seen.records
    where = f"{log.topic} (incarnation {log.incarnation}) {after}"
    bad = []
    # tombstones in flight: any of them may have been written, and dropped since
    unsure = {key for (key, value), n in log.maybe.items() if value is None and n > 0}
    if start < log.floor:
        bad.append(f"{where}: log start {start} went back below {log.floor}")
    if start > max(log.floor, *log.cuts_in_flight, 0):
        if not log.retained:
            bad.append(f"{where}: log start {start} moved past every DeleteRecords")
        elif not log.compacted and sum(seen.batch_bytes.values()) < log.retention_bytes:
            # Retention drops a segment only while retention.bytes remain after it.
            held = sum(seen.batch_bytes.values())
            bad.append(f"{where}: retention left {held} bytes, under {log.retention_bytes}")
    if high < log.end:
        bad.append(f"{where}: high watermark {high} below acknowledged end {log.end}")
    for offset, pair in records.items():
        if offset >= high:
            bad.append(f"{where}: record at {offset} at or past the high watermark {high}")
        elif offset in log.known:
            if log.known[offset] != pair:
                bad.append(f"{where}: offset {offset} holds {pair}, not {log.known[offset]}")
        elif log.maybe[pair] <= 0:
            bad.append(f"{where}: offset {offset} holds {pair}, never sent or sent elsewhere")
        else:
            log.maybe[pair] -= 1
    live = {o: p for o, p in log.known.items() if o >= start}
    if log.compacted:
        latest: dict[bytes, int] = {}
        for offset in sorted([*live, *records]):
            key = (live.get(offset) or records[offset])[0]
            latest[key] = offset
        missing = [o for o in latest.values() if o not in records]
        if log.drops_tombstones:
            # A key's latest record may be gone with a tombstone after it (acknowledged, or
            # in flight), but then so is every older record of the key: nothing deleted
            # comes back.
            present = {key for key, _ in records.values()}
            for offset in missing[:]:
                key, value = log.known[offset]
                if value is None or key in unsure:
                    missing.remove(offset)
                    if key in present:
                        older = [o for o, r in records.items() if r[0] == key]
                        bad.append(f"{where}: deleted key {key} is back at {older[:3]}")
    else:
        missing = [o for o in live if o not in records]
    for offset in sorted(missing)[:5]:
        bad.append(f"{where}: acknowledged {log.known[offset]} at {offset} is gone")
    log.known = dict(records)
    log.maybe.clear()
    log.floor = start
    log.cuts_in_flight.clear()
    return bad


class Schedule:
    def __init__(self, broker: BrokerProcess, rng: random.Random) -> None:
        self.broker = broker
        self.rng = rng
        self.logs = {name: Log(name) for name in TOPICS}
        self.phoenix_present = True
        self.phoenix_pending: str | None = None  # "delete" or "create" in flight at the kill
        self.killed = threading.Event()
        self.admin: AdminClient | None = None
        self.round = 0
        self.sent = 0
        self.errors_while_alive: list[str] = []
        self.violations: list[str] = []
        self.done: dict[str, int] = {}

    # -- waiting on clients, minding the kill ------------------------------------------
    def _result(self, future: concurrent.futures.Future) -> object:
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self.killed.is_set():
                    raise Killed from None
            except Exception:
                if self.killed.is_set():
                    raise Killed from None
                raise

    def _admin(self) -> AdminClient:
        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        return self.admin

    # -- operations --------------------------------------------------------------------
    def create(self, name: str) -> None:
        deadline = time.monotonic() + 30
        while True:  # a just-deleted name may take a moment to be free again
            futures = self._admin().create_topics([NewTopic(name, 1, 1, config=TOPICS[name])])
            try:
                self._result(futures[name])
                return
            except Killed:
                raise
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def produce(self, log: Log, n: int) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.broker.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 1,
                "batch.num.messages": 8,
            }
        )

        def delivered(err: object, msg: object) -> None:
            pair = (msg.key(), msg.value())
            if err is not None:
                if not self.killed.is_set():
                    self.errors_while_alive.append(f"{log.topic}: {err}")
                return
            offset = msg.offset()
            if log.known.get(offset, pair) != pair:
                self.violations.append(
                    f"{log.topic}: offset {offset} acknowledged twice: "
                    f"{log.known[offset]}, then {pair}"
                )
            log.known[offset] = pair
            log.maybe[pair] -= 1

        try:
            for _ in range(n):
                key = b"k%d" % self.rng.randrange(KEYS)
                value = None
                if self.rng.random() >= TOMBSTONES.get(log.topic, 0):
                    tag = f"{log.topic}.{log.incarnation}.{self.round}.{self.sent}"
                    value = tag.encode() + b"." * 40
                self.sent += 1
                log.maybe[(key, value)] += 1
                producer.produce(log.topic, key=key, value=value, on_delivery=delivered)
                producer.poll(0)
                if self.killed.is_set():
                    raise Killed
            while producer.flush(0.1):
                if self.killed.is_set():
                    raise Killed
        finally:
            if self.killed.is_set():
                # Nothing of this producer may reach the restarted broker.
                producer.purge()
                producer.flush(0)
            del producer

    def delete_records(self, log: Log) -> None:
        target = self.rng.randint(log.floor, log.end)
        futures = self._admin().delete_records([TopicPartition(log.topic, 0, target)])
        log.cuts_in_flight.append(target)
        (future,) = futures.values()
        low = self._result(future).low_watermark
        log.cuts_in_flight.remove(target)
        if low < target:
            self.violations.append(f"{log.topic}: DeleteRecords to {target} answered {low}")
        log.floor = max(log.floor, low)

    def recreate_phoenix(self) -> None:
        if self.phoenix_present:
            self.phoenix_pending = "delete"
            self._result(self._admin().delete_topics(["phoenix"])["phoenix"])
            self.phoenix_present = False
        self.logs["phoenix"] = Log("phoenix", self.logs["phoenix"].incarnation + 1)
        self.phoenix_pending = "create"
        self.create("phoenix")
        self.phoenix_present, self.phoenix_pending = True, None

    def step(self) -> None:
        ops = ["squash", "squash", "window", "window", "blend", "blend", "cut", "pause"]
        if self.phoenix_present:
            ops += ["phoenix", "phoenix"]
        ops.append("recreate")
        op = self.rng.choice(ops)
        self.done[op] = self.done.get(op, 0) + 1
        if op in TOPICS:
            self.produce(self.logs[op], self.rng.randint(20, 250))
        elif op == "cut":
            names = ["squash", "window", "blend"] + (["phoenix"] if self.phoenix_present else [])
            self.delete_records(self.logs[self.rng.choice(names)])
        elif op == "recreate":
            self.recreate_phoenix()
        else:
            time.sleep(self.rng.uniform(0.05, 0.4))  # the cleaner and retention run

    # -- rounds ------------------------------------------------------------------------
    def verify(self, after: str) -> None:
        with RawClient(self.broker.bootstrap, timeout=30) as raw:
            for name in ("squash", "window", "blend"):
                seen = read_partition(raw, name)
                assert seen is not None, f"{name} is gone {after}"
                self.violations += check(self.logs[name], seen, after)
            seen = read_partition(raw, "phoenix")
            log = self.logs["phoenix"]
            if self.phoenix_pending == "delete":
                # Deleted or not, but never half: if there, it holds all it had.
                self.phoenix_present = seen is not None
            elif self.phoenix_pending == "create":
                self.phoenix_present = seen is not None
            elif (seen is not None) != self.phoenix_present:
                state = "present" if self.phoenix_present else "deleted"
                self.violations.append(f"phoenix should be {state} {after}")
            if seen is not None:
                self.violations += check(log, seen, after)
            self.phoenix_pending = None
        text = self.broker.log_text()
        for bad in ("Traceback", "retention failed"):
            if bad in text:
                at = text.index(bad)
                self.violations.append(f"broker log {after}: {text[at - 500 : at + 1500]}")

    def run_round(self, how: str) -> None:
        """Operations until the broker is stopped (``how``: SIGTERM, KILL, or TERM_KILL:
        a kill -9 while it shuts down): at a random moment, or as soon as a compaction
        pass has written a .cleaned file, committed a .swap file or a deleted partition's
        directory appears (the moment drawn), at most 3 s in."""
        self.round += 1
        self.killed.clear()
        moment = self.rng.choice(["time", "time", ".cleaned", ".swap", "-delete"])
        deadline = time.monotonic() + (self.rng.uniform(0.3, 2.0) if moment == "time" else 3.0)
        stopped: list[int] = []
        grace = self.rng.uniform(0, 0.2)

        def stop() -> None:
            while time.monotonic() < deadline:
                if at(self.broker.data_dir, moment):
                    self.done[f"stopped at {moment}"] = self.done.get(f"stopped at {moment}", 0) + 1
                    break
                time.sleep(0.001)
            self.killed.set()
            if how == SIGTERM:
                stopped.append(self.broker.terminate(timeout=30))
                return
            if how == TERM_KILL:
                assert self.broker.proc is not None
                self.broker.proc.send_signal(signal.SIGTERM)
                time.sleep(grace)
            self.broker.kill()

        stopper = threading.Thread(target=stop)
        stopper.start()
        try:
            if not self.phoenix_present:
                self.recreate_phoenix()
            while not self.killed.is_set():
                self.step()
        except Killed:
            pass
        finally:
            stopper.join()
            self.admin = None
        if how == SIGTERM:
            assert stopped == [0], f"SIGTERM exit status {stopped}"
            assert temporaries(self.broker.data_dir) == [], "after a clean stop"

    def restart(self, after: str) -> None:
        self.broker.start()
        leftovers = [t for t in temporaries(self.broker.data_dir) if t.endswith("-delete")]
        assert leftovers == [], f"{after}: left at load"
        self.verify(after)


def at(data_dir: Path, moment: str) -> bool:
    """Whether a file or directory named ``*{moment}`` is in sight ("time": never)."""
    if moment == "-delete":
        return any(name.endswith(moment) for name in os.listdir(data_dir))
    if moment in TEMPORARY:
        return any(
            name.endswith(moment)
            for compacted in ("squash-0", "blend-0")
            for name in os.listdir(data_dir / compacted)
        )
    return False


def temporaries(data_dir: Path) -> list[str]:
    out = []
    for entry in data_dir.iterdir():
        if entry.name.endswith("-delete"):
            out.append(entry.name)
        elif entry.is_dir():
            out += [f"{entry.name}/{p.name}" for p in entry.iterdir() if p.suffix in TEMPORARY]
    return out


@pytest.mark.slow
def test_random_kills_among_compaction_retention_and_deletes_lose_nothing_acknowledged(
    broker_process_factory,
) -> None:
    broker = broker_process_factory(BROKER)
    rng = random.Random(SEED)
    schedule = Schedule(broker, rng)
    for name in TOPICS:
        schedule.create(name)
    for round_ in range(ROUNDS):
        how = rng.choices([SIGTERM, KILL, TERM_KILL], weights=[25, 60, 15])[0]
        schedule.run_round(how)
        schedule.restart(f"after round {round_ + 1} ({how}, seed {SEED})")
        assert not schedule.violations, "\n".join(schedule.violations)
    schedule.run_round(SIGTERM)
    schedule.restart(f"after the last clean stop (seed {SEED})")
    assert not schedule.violations, "\n".join(schedule.violations)
    assert not schedule.errors_while_alive, schedule.errors_while_alive[:5]
    assert schedule.sent > 1000, "too little traffic to test anything"
    print(f"seed {SEED}: {schedule.sent} records sent, operations {schedule.done}")
