"""The bank example's command side against `chronik serve --http-listen
--schema-registry-listen`: teller processes racing to withdraw from one account never spend
more than it holds.

Each teller loads the account through the event store (decoded by the broker), decides with
the projection's fold and appends with its expected version under the events topic's Avro
subject, retrying on a conflict (examples/bank/commands.py).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BANK = Path(__file__).resolve().parents[2] / "examples" / "bank"
sys.path.insert(0, str(BANK))
bank = importlib.import_module("bank")
commands = importlib.import_module("commands")
event_schemas = importlib.import_module("event_schemas")
run = importlib.import_module("run")

PARTITIONS = 3
BALANCE = 100_000
TELLERS = 6
WITHDRAWALS = 25  # per teller: 6 x 25 x ~1,750 asks for well over the balance

# One teller: WITHDRAWALS withdrawals of random amounts on one account, all tellers starting
# at the same instant. Prints one JSON line: what it withdrew and the conflicts it retried.
TELLER = textwrap.dedent(
    """
    import json, random, sys, time
    sys.path.insert(0, sys.argv[1])
    import commands
    from chronik.eventstore import EventStore
    bootstrap, http, topic, account = sys.argv[2:6]
    seed, start, count = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8])
    store = EventStore(bootstrap, http)
    rng = random.Random(seed)
    out = {"withdrawn": [], "refused": 0, "conflicts": 0, "gave_up": 0}
    time.sleep(max(0.0, start - time.time()))
    for _ in range(count):
        amount = rng.randint(500, 3000)
        try:
            done = commands.execute(store, topic, account, "withdraw", amount)
        except commands.Refused as exc:
            out["refused"] += 1
            out["conflicts"] += exc.conflicts
            continue
        except commands.TooManyConflicts as exc:
            out["gave_up"] += 1
            out["conflicts"] += exc.conflicts
            continue
        out["withdrawn"].append([amount, done.version])
        out["conflicts"] += done.conflicts
    print(json.dumps(out), flush=True)
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """(bootstrap, HTTP API URL, schema registry URL) of a `chronik serve`."""
    proc, bootstrap, http_url, registry = run.serve_with_http(
        tmp_path_factory.mktemp("bank") / "data"
    )
    try:
        yield bootstrap, http_url, registry
    finally:
        proc.kill()
        proc.wait()


def versioned_topic(server: tuple[str, str, str]) -> str:
    """A new events topic, its subject holding the bank's schema versions 1 and 2."""
    bootstrap, _, registry = server
    name = f"bank-{uuid.uuid4().hex[:8]}.events"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"key.versioning.enable": "true"}
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)])[name].result(30)
    event_schemas.register_all(registry, name)
    return name


def scanned_versions(bootstrap: str, topic: str, partition: int, key: bytes) -> list[int]:
    """The chronik-version headers of the key's records, in offset order, from a full scan
    of its partition (the log itself, not the broker's per-key index)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bank-check", "enable.auto.commit": False}
    )
    tp = TopicPartition(topic, partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=10)
    consumer.assign([TopicPartition(topic, partition, low)])
    versions, last = [], low - 1
    deadline = time.monotonic() + 20
    while last < high - 1 and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                last = msg.offset()
                if msg.key() == key:
                    versions.append(int(dict(msg.headers() or [])["chronik-version"]))
    consumer.close()
    return versions


def test_decisions_follow_the_folded_state(server) -> None:
    from chronik.eventstore import EventStore

    bootstrap, http_url, _ = server
    topic = versioned_topic(server)
    store = EventStore(bootstrap, http_url)
    with pytest.raises(commands.Refused, match="before AccountOpened"):
        commands.execute(store, topic, "acc-1", "deposit", 10)
    assert commands.execute(store, topic, "acc-1", "open", owner="ann").version == 0
    with pytest.raises(commands.Refused, match="already opened"):
        commands.execute(store, topic, "acc-1", "open")
    assert commands.execute(store, topic, "acc-1", "deposit", 500).version == 1
    with pytest.raises(commands.Refused, match="insufficient funds"):
        commands.execute(store, topic, "acc-1", "withdraw", 501)
    assert commands.execute(store, topic, "acc-1", "withdraw", 200).version == 2
    assert commands.execute(store, topic, "acc-1", "close").version == 3
    with pytest.raises(commands.Refused, match="closed account"):
        commands.execute(store, topic, "acc-1", "deposit", 1)
    account = commands.load(store, topic, "acc-1")
    assert (account.version, account.balance, account.state["status"]) == (4, 300, "closed")


def test_tellers_write_avro_that_kafka_consumers_read(server) -> None:
    """The tellers' events are in Confluent's wire format under the latest schema: an
    AvroDeserializer reads them, with the channel the tellers set; an event written by a
    producer under version 1 is folded with them, read as version 2."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from chronik.eventstore import EventStore

    bootstrap, http_url, registry = server
    topic = versioned_topic(server)
    store = EventStore(bootstrap, http_url)
    ctx = SerializationContext(topic, MessageField.VALUE)
    # An account opened by a version-1 producer, before the tellers.
    producer = store.producer()
    opened = commands.new_event("AccountOpened", "acc-v1", owner="old")
    producer.produce(topic, key=b"acc-v1", value=event_schemas.serializer(registry, 1)(opened, ctx))
    assert producer.flush(30) == 0
    commands.execute(store, topic, "acc-v1", "deposit", 70)

    events = store.read(topic, "acc-v1", decode=True)
    registry_client = SchemaRegistryClient({"url": registry})
    latest = registry_client.get_latest_version(f"{topic}-value")
    v1 = registry_client.get_version(f"{topic}-value", 1)
    assert [e.schema_id for e in events] == [v1.schema_id, latest.schema_id]
    assert all(e.value[0] == 0 for e in events)  # Confluent's magic byte
    deserialize = AvroDeserializer(registry_client, event_schemas.schema_text(2))
    decoded = [deserialize(e.value, ctx) for e in events]
    assert [(d["type"], d["channel"], d["amount"]) for d in decoded] == [
        ("AccountOpened", "branch", None), ("MoneyDeposited", "teller", 70)]
    assert commands.load(store, topic, "acc-v1").balance == 70


@pytest.mark.timeout(120)
def test_concurrent_tellers_never_double_spend(server) -> None:
    from chronik.eventstore import EventStore

    bootstrap, http_url, _ = server
    topic = versioned_topic(server)
    store = EventStore(bootstrap, http_url)
    commands.execute(store, topic, "acc-race", "open", owner="race")
    commands.execute(store, topic, "acc-race", "deposit", BALANCE)

    start = time.time() + 4  # every teller imported and connected before the race
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TELLER, str(BANK), bootstrap, http_url, topic, "acc-race",
             str(seed), str(start), str(WITHDRAWALS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for seed in range(TELLERS)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))

    withdrawn = [w for r in reports for w in r["withdrawn"]]
    spent = sum(amount for amount, _ in withdrawn)
    assert spent <= BALANCE
    # The race ran its course: the balance ran out and tellers were refused.
    assert sum(r["refused"] for r in reports) > 0
    # Conflicts happened, and the retry path turned them into decisions.
    assert sum(r["conflicts"] for r in reports) > 0

    events = store.read(topic, "acc-race", decode=True)
    versions = [e.version for e in events]
    assert versions == list(range(len(events)))  # no gap, no duplicate
    assert len(events) == 2 + len(withdrawn)
    # Every successful withdrawal holds the version its teller was told, each a different one.
    assert sorted(v for _, v in withdrawn) == list(range(2, len(events)))
    # The log agrees with the index: a scan of the partition finds the same versions.
    partition = events[0].partition
    assert scanned_versions(bootstrap, topic, partition, b"acc-race") == versions

    # Folded event by event, the balance never goes below zero and ends where it should.
    fold, state = bank.BankFold(), None
    for event in events:
        state = fold.apply(state, fold.parse(b"acc-race", event.value_json))  # raises on overdraft
        assert state["balance"] >= 0
    assert state["balance"] == BALANCE - spent
    assert commands.load(store, topic, "acc-race").balance == BALANCE - spent
