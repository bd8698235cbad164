"""Exactly-once consume-transform-produce with confluent-kafka: a worker (eos_worker.py)
reads an input topic and writes an output topic, its input offsets sent in each
transaction; it is killed with SIGKILL inside transactions, again and again, and
restarted. A read_committed reader of the output then sees every input record exactly
once, and a read_uncommitted one sees the aborted copies too."""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import Producer

from .helpers import RawClient, code, create_topic, req, topic_name
from .replication_support import REPLICATION_CONFIG, create_replicated_topic
from .test_transactions_confluent import read_all

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 1500
PARTITIONS = 3


class Worker:
    """One eos_worker process whose output lines arrive on a queue."""

    def __init__(
        self,
        bootstrap: str,
        source: str,
        sink: str,
        group: str,
        txn_id: str,
        errlog: Path | None = None,
    ) -> None:
        err: IO[bytes] | int = errlog.open("ab") if errlog else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.eos_worker",
                bootstrap,
                source,
                sink,
                group,
                txn_id,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        if not isinstance(err, int):
            err.close()
        self.lines: queue.Queue[str] = queue.Queue()
        # The last line the worker printed that a wait_for read, for a failure's report.
        self.last = ""
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.put(line.decode().strip())

    def wait_for(self, word: str, count: int, timeout: float) -> bool:
        seen = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    return False
                continue
            self.last = line
            if line.startswith(word):
                seen += 1
                if seen >= count:
                    return True
        return False

    def drain(self) -> None:
        """Forget the lines printed so far."""
        while True:
            try:
                self.lines.get_nowait()
            except queue.Empty:
                return

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def produce_input(bootstrap: str, topic: str, start: int = 0, count: int = RECORDS) -> list[bytes]:
    values = [b"v%05d" % i for i in range(start, start + count)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, key=b"k%d" % (i % 17), value=value)
    assert producer.flush(30) == 0
    return values


def run_with_kills(bootstrap: str, source: str, sink: str, kills: int, seed: int) -> None:
    """Start the worker, kill it inside a transaction ``kills`` times, then let a last
    one run until the output holds every input record."""
    rng = random.Random(seed)
    group = topic_name("eos-group")
    txn_id = topic_name("eos-tid")
    for i in range(kills):
        worker = Worker(bootstrap, source, sink, group, txn_id)
        try:
            # Killed inside the n-th transaction: its records are on the broker, the
            # transaction is open, and every other time its offsets are sent too.
            point = "OFFSETS_SENT" if i % 2 == 0 else "IN_TXN"
            worker.wait_for(point, rng.randint(1, 4), timeout=60)
            time.sleep(rng.random() * 0.015)
        finally:
            worker.kill()
    worker = Worker(bootstrap, source, sink, group, txn_id)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if len(read_all(bootstrap, sink, 1, "read_committed", settle=0.3)) >= RECORDS:
                break
            time.sleep(0.5)
    finally:
        worker.kill()


def test_consume_transform_produce_is_exactly_once_through_kill_9(broker_process):
    bootstrap = broker_process.bootstrap
    source = topic_name("eos-in")
    sink = topic_name("eos-out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink)
    values = produce_input(bootstrap, source)

    run_with_kills(bootstrap, source, sink, kills=4, seed=11)

    expected = Counter(b"out-" + v for v in values)
    committed = Counter(read_all(bootstrap, sink, 1, "read_committed"))
    assert committed == expected, (
        f"missing {len(expected - committed)}, duplicated {len(committed - expected)}"
    )
    uncommitted = Counter(read_all(bootstrap, sink, 1, "read_uncommitted"))
    aborted = uncommitted - committed
    # Every kill left an open transaction whose records were aborted, not lost or kept.
    assert sum(aborted.values()) > 0
    assert set(aborted) <= set(expected)
    assert not committed - uncommitted


def transaction_coordinator(cluster, txn_id: str) -> int:
    """The broker id FindCoordinator names for ``txn_id``, asked of a running broker."""
    for i in cluster.running():
        try:
            with RawClient(cluster.broker(i).bootstrap) as raw:
                response = raw.request(req(10, 3, key=txn_id, key_type=1))
        except OSError:
            continue
        if code(response.error_code) == 0:
            return int(response.node_id)
    return -1


@pytest.mark.slow
def test_exactly_once_through_coordinator_kills_in_a_cluster(cluster_factory, tmp_path):
    cluster = cluster_factory(config=REPLICATION_CONFIG)
    source = topic_name("eos-in")
    sink = topic_name("eos-out")
    create_replicated_topic(cluster, source, PARTITIONS)
    create_replicated_topic(cluster, sink, 1)
    # The input arrives in rounds, so the worker has transactions to run at each kill
    # and after it, however fast it drained the rounds before.
    rounds = 5
    values: list[bytes] = []

    def produce_round() -> None:
        count = RECORDS // rounds
        values.extend(produce_input(cluster.bootstrap, source, len(values), count))

    produce_round()
    group = topic_name("eos-group")
    txn_id = topic_name("eos-tid")

    # Each worker's stderr (librdkafka's log, a traceback) is kept for a failure's report.
    errlog = tmp_path / "workers.err"

    def start_worker() -> Worker:
        return Worker(cluster.bootstrap, source, sink, group, txn_id, errlog)

    def worker_log() -> str:
        text = errlog.read_text(errors="replace") if errlog.exists() else ""
        return "\n".join(text.splitlines()[-30:])

    worker = start_worker()
    try:
        # A worker whose init_transactions or first commit fails while the fresh cluster
        # is still electing the leaders of its internal topics exits with the error. Twice
        # in full-suite runs (never alone) the first worker neither committed nor failed in
        # 60-75 s, with nothing in librdkafka's log and nothing in the brokers' logs; the
        # cause is not found (the later phase works around librdkafka waiting past its own
        # timeouts, confluentinc/librdkafka#5511). Either worker is replaced, as a
        # supervisor would, which is what this test is about; no commit at all in 150 s is
        # a failure, reported with the worker's last line and the workers' log.
        deadline = time.monotonic() + 150
        while not worker.wait_for("COMMITTED", 1, timeout=45):
            assert time.monotonic() < deadline, (
                f"the worker made no progress (its last line: {worker.last!r}); its log:\n"
                + worker_log()
            )
            worker.kill()
            worker = start_worker()
        for point in ("IN_TXN", "OFFSETS_SENT"):
            produce_round()
            assert worker.wait_for(point, 1, timeout=30), (
                f"the worker never reached {point}; its log:\n" + worker_log()
            )
            victim = transaction_coordinator(cluster, txn_id)
            assert victim > 0
            cluster.kill(victim)
            # The coordinator moves once the controller sees the broker gone; commits
            # printed before that may still be the old coordinator's, so they are dropped.
            deadline = time.monotonic() + 120
            while transaction_coordinator(cluster, txn_id) in (victim, -1):
                assert time.monotonic() < deadline, "the coordinator never moved"
                time.sleep(0.5)
            worker.drain()
            produce_round()
            # The transaction in flight completes, or the worker fails and is replaced;
            # either way commits resume on the new coordinator. A worker that neither
            # commits nor fails is replaced too, as a supervisor would: librdkafka 2.16
            # can wait forever on a group coordinator that left the metadata
            # (confluentinc/librdkafka#5511, send_offsets_to_transaction never returns).
            stalled = time.monotonic() + 20
            while not worker.wait_for("COMMITTED", 1, timeout=5):
                assert time.monotonic() < deadline, (
                    "no commit after the coordinator's kill; the workers' log:\n" + worker_log()
                )
                if worker.proc.poll() is not None or time.monotonic() > stalled:
                    worker.kill()
                    worker = start_worker()
                    stalled = time.monotonic() + 30
            cluster.start(victim)
        assert len(values) == RECORDS
        deadline = time.monotonic() + 120
        stalled = time.monotonic() + 30
        while len(read_all(cluster.bootstrap, sink, 1, "read_committed", settle=0.3)) < RECORDS:
            assert time.monotonic() < deadline, (
                "the output never caught up; the workers' log:\n" + worker_log()
            )
            # Here too a worker that neither commits nor fails is replaced, as above: a
            # full-suite run once saw the output stop short with the worker alive.
            if worker.wait_for("COMMITTED", 1, timeout=0.5):
                stalled = time.monotonic() + 30
            elif worker.proc.poll() is not None or time.monotonic() > stalled:
                worker.kill()
                worker = start_worker()
                stalled = time.monotonic() + 30
    finally:
        worker.kill()

    expected = Counter(b"out-" + v for v in values)
    committed = Counter(read_all(cluster.bootstrap, sink, 1, "read_committed"))
    assert committed == expected, (
        f"missing {len(expected - committed)}, duplicated {len(committed - expected)}"
    )
