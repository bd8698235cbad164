"""The client programs of a chaos run, each a process inside a client node's namespace,
each appending its history (chaos.history) as it goes:

    python -m chaos.workers KIND --id ID --bootstrap HOST:PORT,... --history PATH
        --topic TOPIC --partitions N --seed SEED [options]

KIND is one of:

- ``producer``: an idempotent acks=all confluent-kafka producer sending ``--rate``
  records a second, key ``k<i>`` (i < ``--keys``) to partition ``i % N``, each value
  unique, ``<id>-k<i>-<seq:06d>`` with ``seq`` counting that key's sends. Events:
  ``invoke send {key, value, partition, gen}``, then ``ok send {value, partition, offset}``,
  ``info send {value, error}`` (a delivery error, a purge at stop: it may still be
  written) or ``fail send {value, error}`` (refused by the client, never sent). ``gen`` counts
  producer instances: a fatal error re-creates the producer (``event recreate {gen}``), and
  order is only promised within one instance.
- ``consumer``: a member of group ``--group`` subscribed to the topic, auto commit off,
  isolation ``--isolation``. ``event start {incarnation}``, ``event assign/revoke
  {partitions}``, ``ok read {records: [[partition, offset, key, value], ...]}`` after each
  poll, and about every ``--commit-every`` seconds (and on revoke and stop) a commit of
  its positions, awaited before the next one: ``invoke commit {offsets}``, then ``ok
  commit {offsets, invoked}`` (``offsets``: {partition: next offset to read};
  ``invoked``: the invoke's time) or ``fail``/``info commit {offsets, invoked, error}``.
  A commit unanswered after 12 s is recorded ``info`` and the next may go; its answer,
  if it comes, is recorded too. The harness kills it with kill -9 and starts it again
  with ``--incarnation`` one higher.
- ``txn``: a transactional producer (transactional.id ``chaos-<id>``); each transaction
  writes 1-2 records to each of 2-3 partitions and then commits or aborts at random
  (``--commit-ratio``): ``invoke txn {txn, decision, records: [[partition, value], ...]}``,
  ``invoke commit {txn}`` just before the commit is requested, then ``ok txn {txn,
  outcome: "committed", offsets}``, ``fail txn {txn, outcome: "aborted", offsets}`` or
  ``info txn {txn, outcome: "unknown", error}``. Values are ``<id>-<txn:06d>-<i>``. A
  fatal error (fenced, ...) re-creates the producer (``event recreate``).
- ``eventstore``: one of several writers racing on keys ``acct-<i>`` (i < ``--keys``) of
  a topic with key.versioning.enable=true, through kafka-python, whose error names the
  actual version on a conflict. Each append is one record with the header
  chronik-expected-version = the version it believes is next: ``invoke append {key,
  expected, value}``, then ``ok append {key, expected, value, partition, offset}``,
  ``fail append {key, expected, value, actual, error}`` (refused: a conflict names the
  actual version, which the writer then expects) or ``info append {key, expected, value,
  error}``. kafka-python's idempotent producer is unusable after a refused batch, so it
  is made anew after any failure.

Every worker writes ``event start {argv, pid, seed}`` first and ``event stop`` last.
SIGTERM (or SIGINT) stops it cleanly: it stops sending, waits a bounded time for
outcomes, commits (consumers), and writes its last line. Every wait on the cluster is
bounded, so a worker cut off from the brokers for minutes keeps trying and records
``info``/``fail`` outcomes instead of hanging.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .history import History, text

EXPECTED_HEADER = "chronik-expected-version"
DELIVERY_TIMEOUT_MS = 30_000
REQUEST_TIMEOUT_MS = 10_000
# How long a stopping worker still waits for outcomes (the harness waits longer).
STOP_GRACE_S = 25.0
# How long a consumer waits for a commit's answer before it reads on (and records info).
COMMIT_WAIT_S = 12.0
# Each transactional call's own deadline; a retriable failure is retried until stopped.
TXN_CALL_S = 10.0

STOP = threading.Event()


def _on_signal(signum: int, frame: Any) -> None:
    STOP.set()


def _stopped_for(since: list[float]) -> float:
    """Seconds since STOP was first seen (0 while running); ``since`` holds that time."""
    if not STOP.is_set():
        return 0.0
    if not since:
        since.append(time.monotonic())
    return time.monotonic() - since[0]


def _pace(next_at: float, interval: float, serve: Callable[[float], Any]) -> float:
    """Wait until ``next_at`` while ``serve``-ing callbacks; the next due time (not
    drifting, but not catching up a backlog in a burst either)."""
    while not STOP.is_set():
        delay = next_at - time.monotonic()
        if delay <= 0:
            break
        serve(min(delay, 0.1))
    now = time.monotonic()
    return max(next_at + interval, now - interval)


# -- producer ---------------------------------------------------------------------------


def run_producer(args: argparse.Namespace, history: History) -> None:
    from confluent_kafka import KafkaException, Producer

    rnd = random.Random(f"{args.seed}:{args.id}")
    fatal = threading.Event()

    def on_error(err: Any) -> None:
        if err.fatal():
            fatal.set()
            history.event("error", error=str(err), fatal=True)

    config = {
        "bootstrap.servers": args.bootstrap,
        "client.id": args.id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "retry.backoff.ms": 100,
        "error_cb": on_error,
    }

    def delivered(err: Any, msg: Any) -> None:
        value = text(msg.value())
        if err is None:
            history.ok("send", value=value, partition=msg.partition(), offset=msg.offset())
        else:
            # Even a message purged from the queue may be a retry of one already sent.
            history.info("send", value=value, error=str(err))

    gen = 0
    producer = Producer(config)
    seq: dict[int, int] = defaultdict(int)
    interval = 1.0 / args.rate
    next_at = time.monotonic()
    while not STOP.is_set():
        if fatal.is_set():
            # Outcomes of the old instance arrive as its queue is failed.
            producer.flush(5)
            producer.purge()
            producer.poll(0)
            gen += 1
            fatal.clear()
            producer = Producer(config)
            history.event("recreate", gen=gen)
        k = rnd.randrange(args.keys)
        seq[k] += 1
        key, value = f"k{k}", f"{args.id}-k{k}-{seq[k]:06d}"
        partition = k % args.partitions
        history.invoke("send", key=key, value=value, partition=partition, gen=gen)
        while True:
            try:
                producer.produce(args.topic, key=key.encode(), value=value.encode(),
                                 partition=partition, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:
                history.fail("send", value=value, error=str(exc))
                if exc.args[0].fatal():
                    fatal.set()
                break
        next_at = _pace(next_at, interval, producer.poll)
    left = producer.flush(STOP_GRACE_S)
    if left:
        # What is left comes back through the delivery callback, as info.
        producer.purge()
        producer.flush(5)
    history.event("drained", unacknowledged=left)


# -- consumer ---------------------------------------------------------------------------


def run_consumer(args: argparse.Namespace, history: History) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    consumer: Any = None
    # Commits waiting for their answer, oldest first: {"offsets", "invoked", "due",
    # "late"}. librdkafka's synchronous commit has no deadline (with no coordinator
    # reachable it waits on) and, called off the polling thread during a rebalance, can
    # wait forever: commits are sent asynchronously, one at a time, their answers come
    # through on_commit while reading goes on, and one unanswered after COMMIT_WAIT_S is
    # recorded info (a later answer is still recorded).
    pending: list[dict[str, Any]] = []
    # Partition -> how far a commit may go on what the history holds: one past the last
    # offset recorded as read, or a position committed from the main loop.
    recorded: dict[int, int] = {}

    def on_commit(err: Any, partitions: list[Any]) -> None:
        offsets = {str(tp.partition): tp.offset for tp in partitions}
        match = next((c for c in pending if c["offsets"] == offsets), None)
        if match is not None:
            pending.remove(match)
        invoked = {"invoked": match["invoked"]} if match is not None else {}
        if err is not None and err.code() != KafkaError.NO_ERROR:
            if err.code() == KafkaError._NO_OFFSET:
                return
            # A broker's answer (code > 0) refused it; a local error leaves it unknown.
            record = history.fail if err.code() > 0 else history.info
            record("commit", offsets=offsets, error=str(err), **invoked)
            return
        done = {str(tp.partition): tp.offset for tp in partitions if tp.error is None}
        refused = {str(tp.partition): tp.offset for tp in partitions if tp.error is not None}
        if done:
            history.ok("commit", offsets=done, **invoked)
        if refused:
            errors = sorted({str(tp.error) for tp in partitions if tp.error is not None})
            history.fail("commit", offsets=refused, error="; ".join(errors), **invoked)

    def waiting() -> bool:
        """Whether a commit still awaits its answer in time (expired ones recorded)."""
        now = time.monotonic()
        for c in pending:
            if not c["late"] and now > c["due"]:
                c["late"] = True
                history.info("commit", offsets=c["offsets"], invoked=c["invoked"],
                             error=f"no answer in {COMMIT_WAIT_S:.0f}s (still waiting)")
        return any(not c["late"] for c in pending)

    def commit(recorded_only: bool = False) -> None:
        """Commit the positions; with ``recorded_only`` no further than what the history
        holds as read (a rebalance callback runs inside consume(), when the position may
        already count messages consume() has not handed over yet)."""
        if waiting():
            return
        try:
            assigned = consumer.assignment()
            positions = [tp for tp in consumer.position(assigned) if tp.offset >= 0]
        except KafkaException as exc:
            history.event("error", error=str(exc))
            return
        # Only partitions read since they were assigned: librdkafka's position of a
        # partition lost and assigned again is the old one until it is read again, and
        # committing it would move the group's offset back.
        positions = [tp for tp in positions if tp.partition in recorded]
        if recorded_only:
            for tp in positions:
                tp.offset = min(tp.offset, recorded[tp.partition])
        else:
            # Outside consume() the position counts only what was handed over (and
            # recorded), past a read_committed partition's markers too.
            for tp in positions:
                recorded[tp.partition] = max(recorded[tp.partition], tp.offset)
        if not positions:
            return
        offsets = {str(tp.partition): tp.offset for tp in positions}
        invoked = history.invoke("commit", offsets=offsets)["time"]
        pending.append({"offsets": offsets, "invoked": invoked, "late": False,
                        "due": time.monotonic() + COMMIT_WAIT_S})
        try:
            consumer.commit(offsets=positions, asynchronous=True)
        except KafkaException as exc:
            pending.pop()
            err = exc.args[0]
            record = history.fail if err.code() > 0 else history.info
            record("commit", offsets=offsets, invoked=invoked, error=str(err))

    def forget(partitions: list[Any]) -> None:
        for p in partitions:
            recorded.pop(p.partition, None)

    def on_assign(c: Any, partitions: list[Any]) -> None:
        forget(partitions)
        history.event("assign", partitions=sorted(p.partition for p in partitions))

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        # Eager rebalancing: what was read is committed before another member takes it
        # (the request goes out now; the coordinator takes it before the rebalance ends).
        commit(recorded_only=True)
        forget(partitions)
        history.event("revoke", partitions=sorted(p.partition for p in partitions))

    def on_lost(c: Any, partitions: list[Any]) -> None:
        forget(partitions)
        history.event("lost", partitions=sorted(p.partition for p in partitions))

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "client.id": args.id,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": args.isolation,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 60000,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "on_commit": on_commit,
    })
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    rnd = random.Random(f"{args.seed}:{args.id}:{args.incarnation}")
    due = time.monotonic() + args.commit_every * rnd.uniform(0.5, 1.5)
    errors_seen = 0

    def read(timeout: float) -> None:
        nonlocal errors_seen
        records = []
        for msg in consumer.consume(200, timeout):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF and errors_seen < 1000:
                    errors_seen += 1
                    history.event("error", error=str(err))
                continue
            records.append([msg.partition(), msg.offset(), text(msg.key()), text(msg.value())])
        if records:
            history.ok("read", records=records)
            for p, offset, _, _ in records:
                recorded[p] = max(recorded.get(p, 0), offset + 1)

    while not STOP.is_set():
        read(0.5)
        if time.monotonic() >= due:
            commit()
            due = time.monotonic() + args.commit_every * rnd.uniform(0.5, 1.5)
    # The last commit: what was read up to now, its answer awaited a bounded time.
    deadline = time.monotonic() + STOP_GRACE_S
    while waiting() and time.monotonic() < deadline:
        read(0.2)
    commit()
    while waiting() and time.monotonic() < deadline:
        read(0.2)
    closing = threading.Thread(target=consumer.close, daemon=True)
    closing.start()
    closing.join(COMMIT_WAIT_S)
    if closing.is_alive():
        history.event("error", error=f"close did not finish in {COMMIT_WAIT_S:.0f}s")


# -- transactions -----------------------------------------------------------------------


class _Fatal(Exception):
    """The transactional producer must be made anew."""


def run_txn(args: argparse.Namespace, history: History) -> None:
    from confluent_kafka import KafkaException, Producer

    rnd = random.Random(f"{args.seed}:{args.id}")
    stop_seen: list[float] = []
    config = {
        "bootstrap.servers": args.bootstrap,
        "client.id": args.id,
        "transactional.id": f"chaos-{args.id}",
        "acks": "all",
        "linger.ms": 5,
        "transaction.timeout.ms": 20_000,
        "message.timeout.ms": 15_000,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
    }

    def give_up() -> bool:
        return _stopped_for(stop_seen) > STOP_GRACE_S

    def retrying(call: Callable[[], Any]) -> None:
        """``call`` again while it fails retriably; a fatal error raises _Fatal, an
        abortable one its KafkaException."""
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    raise _Fatal(str(err)) from None
                if err.retriable() and not give_up():
                    time.sleep(0.2)
                    continue
                raise

    def new_producer() -> Any:
        while True:
            producer = Producer(config)
            try:
                # Fences an earlier instance of this id and ends its open transaction.
                retrying(lambda p=producer: p.init_transactions(TXN_CALL_S))
                return producer
            except (_Fatal, KafkaException) as exc:
                history.event("error", error=f"init_transactions: {exc}")
                if give_up():
                    return None
                time.sleep(1)

    def transact(producer: Any, n: int, records: list[list[Any]], decision: str) -> bool:
        """One transaction, its outcome recorded; whether the producer is still usable."""
        delivered: list[list[Any]] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered.append([msg.partition(), msg.offset(), text(msg.value())])

        committing = False
        try:
            producer.begin_transaction()
            for p, value in records:
                while True:
                    try:
                        producer.produce(args.topic, key=f"t{n}".encode(), value=value.encode(),
                                         partition=p, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.1)
            if decision == "commit":
                history.invoke("commit", txn=n)
                committing = True
                retrying(lambda: producer.commit_transaction(TXN_CALL_S))
                history.ok("txn", txn=n, outcome="committed", offsets=delivered)
            else:
                retrying(lambda: producer.abort_transaction(TXN_CALL_S))
                history.fail("txn", txn=n, outcome="aborted", offsets=delivered)
            return True
        except (_Fatal, KafkaException) as exc:
            error = str(exc)
            if isinstance(exc, KafkaException) and exc.args[0].txn_requires_abort():
                try:
                    retrying(lambda: producer.abort_transaction(TXN_CALL_S))
                    history.fail("txn", txn=n, outcome="aborted", offsets=delivered, error=error)
                    return True
                except (_Fatal, KafkaException) as again:
                    error = f"{error}; abort: {again}"
            if committing:
                history.info("txn", txn=n, outcome="unknown", offsets=delivered, error=error)
            else:
                # No commit was ever asked for: the coordinator can only abort it.
                history.fail("txn", txn=n, outcome="aborted", offsets=delivered, error=error,
                             never_committed=True)
            history.event("recreate", error=error)
            return False

    producer = new_producer()
    n = 0
    interval = 1.0 / args.rate
    while producer is not None and not STOP.is_set():
        n += 1
        count = rnd.randint(2, min(3, args.partitions))
        chosen = sorted(rnd.sample(range(args.partitions), count))
        records = [[p, f"{args.id}-{n:06d}-{i}"] for i, p in enumerate(
            p for p in chosen for _ in range(rnd.randint(1, 2)))]
        decision = "commit" if rnd.random() < args.commit_ratio else "abort"
        history.invoke("txn", txn=n, decision=decision, records=records)
        if not transact(producer, n, records, decision):
            producer.purge()
            producer = new_producer()
        _pace(time.monotonic() + interval * rnd.uniform(0.5, 1.5), 0.0, time.sleep)
    if producer is not None:
        producer.flush(5)


# -- event store ------------------------------------------------------------------------

ACTUAL = re.compile(r"actual (\d+)")


def run_eventstore(args: argparse.Namespace, history: History) -> None:
    import logging

    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError, KafkaError

    logging.basicConfig(level=logging.ERROR)
    rnd = random.Random(f"{args.seed}:{args.id}")
    keys = [f"acct-{i}" for i in range(args.keys)]
    guess = dict.fromkeys(keys, 0)
    producer: Any = None
    seq = 0

    def make() -> Any:
        return KafkaProducer(
            bootstrap_servers=args.bootstrap.split(","),
            client_id=args.id,
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            max_block_ms=10_000,
            # kafka-python gives its whole bootstrap deadline to one broker picked at
            # random, which hangs on a cut link: short attempts, each a new pick.
            bootstrap_timeout_ms=3_000,
        )

    def drop() -> None:
        nonlocal producer
        if producer is not None:
            try:
                producer.close(timeout=2)
            except Exception as exc:  # noqa: BLE001 - a broken client may fail to close
                history.event("error", error=f"close: {exc!r}")
            producer = None

    interval = 1.0 / args.rate
    while not STOP.is_set():
        if producer is None:
            try:
                producer = make()
            except KafkaError as exc:  # e.g. NoBrokersAvailable while cut off
                history.event("error", error=f"connect: {exc!r}")
                STOP.wait(1.0)
                continue
        key = rnd.choice(keys)
        expected = guess[key]
        seq += 1
        value = f"{args.id}-{key}-{seq:06d}"
        history.invoke("append", key=key, expected=expected, value=value)
        try:
            future = producer.send(args.topic, key=key.encode(), value=value.encode(),
                                   headers=[(EXPECTED_HEADER, str(expected).encode())])
            meta = future.get(timeout=DELIVERY_TIMEOUT_MS / 1000 + 10)
        except InvalidRecordError as exc:
            found = ACTUAL.search(str(exc))
            actual = int(found.group(1)) if found else None
            history.fail("append", key=key, expected=expected, value=value, actual=actual,
                         error=str(exc))
            guess[key] = actual if actual is not None else expected + 1
            drop()
        except Exception as exc:  # noqa: BLE001 - timeouts, connection and broker errors
            history.info("append", key=key, expected=expected, value=value, error=repr(exc))
            drop()
        else:
            history.ok("append", key=key, expected=expected, value=value,
                       partition=meta.partition, offset=meta.offset)
            guess[key] = expected + 1
        _pace(time.monotonic() + interval * rnd.uniform(0.5, 1.5), 0.0, time.sleep)
    drop()


# -- entry point ------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[argparse.Namespace, History], None]] = {
    "producer": run_producer,
    "consumer": run_consumer,
    "txn": run_txn,
    "eventstore": run_eventstore,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.workers")
    parser.add_argument("kind", choices=sorted(RUNNERS))
    parser.add_argument("--id", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--rate", type=float, default=20.0, help="operations a second")
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--group", default="chaos")
    parser.add_argument("--isolation", default="read_uncommitted",
                        choices=["read_uncommitted", "read_committed"])
    parser.add_argument("--commit-every", type=float, default=1.0, help="seconds")
    parser.add_argument("--commit-ratio", type=float, default=0.7)
    parser.add_argument("--incarnation", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    history = History(args.history, args.id, args.kind)
    history.event("start", argv=sys.argv[1:] if argv is None else argv, pid=os.getpid(),
                  seed=args.seed, incarnation=args.incarnation, topic=args.topic,
                  group=args.group, isolation=args.isolation)
    status = 0
    try:
        RUNNERS[args.kind](args, history)
    except Exception:  # noqa: BLE001 - recorded, then the worker exits non-zero
        history.event("crash", error=traceback.format_exc())
        status = 1
    finally:
        history.event("stop", status=status)
        history.close()
    return status


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Past the last history line nothing is owed: a client library's teardown that
    # waits on an unreachable broker must not keep the process alive.
    os._exit(code)
