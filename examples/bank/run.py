"""The bank-account projection, runnable: ``python examples/bank/run.py demo``.

Commands:
  demo      start a broker serving the schema registry (unless --bootstrap-server), generate
            events, project, replay, compare
  generate  produce a reproducible bank history to the events topic, in Avro: the first half
            under schema version 1, then version 2 registered (checked compatible first)
            and the rest under it
  project   run the projection (continuous, or --available-now to stop when caught up)
  replay    rebuild the read model from offset 0 on a fresh checkpoint
  show      print the read model from Parquet and the number of dead letters
  tellers   the command side: teller processes open accounts, then deposit and withdraw
            at random for --seconds, each command loading the account by key and appending
            with its expected version (see commands.py); prints what they did and checks
            every account's balance against the money the tellers moved
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import chronik  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))

import bank  # noqa: E402
import event_schemas  # noqa: E402


class Topics:
    def __init__(self, prefix: str = "bank"):
        self.events = f"{prefix}.events"
        self.accounts = f"{prefix}.accounts"  # the read model, compacted
        self.dead = f"{prefix}.dead-letters"


T = Topics()


def create_topics(bootstrap: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from chronik.spark.options import quiet  # librdkafka: warnings and errors only

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    wanted = [
        # The command side appends with expected versions: the events topic opts in.
        NewTopic(T.events, partitions, 1, config={"key.versioning.enable": "true"}),
        NewTopic(T.accounts, partitions, 1, config={"cleanup.policy": "compact"}),
        NewTopic(T.dead, 1, 1),
    ]
    existing = admin.list_topics(timeout=30).topics
    missing = [t for t in wanted if t.topic not in existing]
    for f in (admin.create_topics(missing) if missing else {}).values():
        f.result(30)


def produce_history(bootstrap: str, registry_url: str, accounts: int, events: int, seed: int,
                    v2_from: int | None = None, say=print) -> int:
    """The generated history, Avro through confluent-kafka's AvroSerializer: events before
    ``v2_from`` (default: half of them) under schema version 1, then version 2 registered
    and the rest under it. The broken events that are no Avro record go as they are."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from chronik.spark.options import quiet  # librdkafka: warnings and errors only

    # murmur2 (Kafka's Java partitioner) puts each account where the event store's reads
    # and appends by key look for it.
    producer = Producer(quiet({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                               "enable.idempotence": True, "partitioner": "murmur2_random"}))
    history = bank.generate(accounts, events, seed)
    split = len(history) // 2 if v2_from is None else v2_from
    ctx = SerializationContext(T.events, MessageField.VALUE)
    subject = event_schemas.subject(T.events)
    say(f"registered {subject} version 1: schema id "
        f"{event_schemas.register(registry_url, T.events, 1)}")
    serialize = event_schemas.serializer(registry_url, 1)
    for i, (key, event) in enumerate(history):
        if i == split:
            if producer.flush(60):
                raise SystemExit("not every event was delivered")
            schema_id = event_schemas.register(registry_url, T.events, 2)
            say(f"{split} events written under version 1; version 2 (adds channel, default "
                f"'branch') is compatible, registered: schema id {schema_id}")
            serialize = event_schemas.serializer(registry_url, 2)
        value = event if isinstance(event, bytes) else serialize(event, ctx)
        while True:
            try:
                producer.produce(T.events, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise SystemExit("not every event was delivered")
    return len(history)


def event_count(bootstrap: str) -> int:
    from chronik.spark.offsets import OffsetPlanner
    from chronik.spark.options import Subscription

    planner = OffsetPlanner({"bootstrap.servers": bootstrap}, Subscription(topics=(T.events,)))
    tps = planner.partitions()
    latest, earliest = planner.latest(tps), planner.earliest(tps)
    return sum(latest[tp] - earliest[tp] for tp in tps)


def run_teller(bootstrap: str, http_url: str, topic: str, accounts: list[str], seconds: float,
               seed: int, results) -> None:
    """One teller process: random deposits and withdrawals until the time is up."""
    import commands

    from chronik.eventstore import EventStore

    teller = commands.Teller(EventStore(bootstrap, http_url), topic)
    rng = random.Random(seed)
    moved: Counter[str] = Counter()  # per account: money in minus money out
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        account = rng.choice(accounts)
        if rng.random() < 0.5:
            amount = rng.randint(1, 10_000)
            if teller.run(account, "deposit", amount):
                moved[account] += amount
        else:
            amount = rng.randint(1, 15_000)
            if teller.run(account, "withdraw", amount):
                moved[account] -= amount
    results.put({"done": teller.done, "refused": teller.refused, "conflicts": teller.conflicts,
                 "gave_up": teller.gave_up, "moved": dict(moved)})


def tellers(bootstrap: str, http_url: str, registry_url: str, accounts: int, count: int,
            seconds: float, seed: int) -> bool:
    """Open the accounts, run the tellers, and check every balance: it must equal the
    balance before plus what the tellers report they moved, and never be negative."""
    import multiprocessing

    import commands

    from chronik.eventstore import EventStore

    event_schemas.register_all(registry_url, T.events)  # the tellers append under it
    store = EventStore(bootstrap, http_url)
    names = [f"teller-acc-{n}" for n in range(accounts)]
    before = {}
    for name in names:
        with contextlib.suppress(commands.Refused):  # opened by an earlier run
            commands.execute(store, T.events, name, "open", owner=f"owner-{name}")
        before[name] = commands.load(store, T.events, name).balance
    ctx = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive fork
    results = ctx.Queue()
    procs = [ctx.Process(target=run_teller,
                         args=(bootstrap, http_url, T.events, names, seconds, seed + i, results))
             for i in range(count)]
    for proc in procs:
        proc.start()
    reports = [results.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    total = {k: sum(r[k] for r in reports) for k in ("done", "refused", "conflicts", "gave_up")}
    print(f"{count} tellers, {accounts} accounts, {seconds:g} s: {total['done']} commands "
          f"appended, {total['refused']} refused (insufficient funds), {total['conflicts']} "
          f"version conflicts retried, {total['gave_up']} given up")
    ok = True
    for name in names:
        moved = sum(r["moved"].get(name, 0) for r in reports)
        account = commands.load(store, T.events, name)
        good = account.balance == before[name] + moved and account.balance >= 0
        ok &= good
        print(f"{name:>14} events={account.version:>5} balance={account.balance:>9} "
              f"(before {before[name]} + moved {moved}) {'ok' if good else 'WRONG'}")
    return ok


def serve_with_http(data_dir: Path) -> tuple[subprocess.Popen, str, str, str]:
    """`chronik serve` with its HTTP API and schema registry on free loopback ports:
    (process, bootstrap, HTTP API URL, registry URL)."""
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    bootstrap, http, registry = (f"127.0.0.1:{p}" for p in ports)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE.parents[1] / "src"), env.get("PYTHONPATH")) if p)
    # The broker's own start and stop lines would land among the tellers' report; its
    # warnings and errors still show.
    proc = subprocess.Popen(
        [sys.executable, "-m", "chronik", "serve", "--data-dir", str(data_dir),
         "--listen", bootstrap, "--http-listen", http, "--schema-registry-listen", registry,
         "--log-level", "WARNING"], env=env)
    deadline = time.monotonic() + 30
    while True:
        try:
            for port in reversed(ports):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, bootstrap, f"http://{http}", f"http://{registry}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("chronik serve did not start") from None
            time.sleep(0.1)


def spark_session(master: str | None):
    # Executors in local mode are child processes: they find chronik and bank through this.
    paths = [str(HERE), str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    from pyspark import cloudpickle

    from chronik.spark import session

    cloudpickle.register_pickle_by_value(bank)  # ship the domain code with the job
    # Run locally, the Python workers use this interpreter (and so this venv's pyarrow).
    spark = session(
        "chronik-bank-projection",
        master,
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    # Spark's warnings (adaptive execution's, per query) would interleave with the output.
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Workdir:
    """Checkpoints by generation (a replay starts the next one) and the Parquet read model.

    On a cluster, give --checkpoint and --parquet as URIs every node reaches (hdfs://, s3a://);
    the work directory then only keeps the generation number, on the driver.
    """

    def __init__(self, root: str, checkpoint: str | None = None, parquet: str | None = None):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._checkpoint, self._parquet = checkpoint, parquet

    @property
    def generation(self) -> int:
        current = self.root / "GENERATION"
        return int(current.read_text()) if current.exists() else 0

    def next_generation(self) -> None:
        (self.root / "GENERATION").write_text(str(self.generation + 1))

    @property
    def checkpoint(self) -> str:
        base = self._checkpoint or str(self.root / "checkpoints")
        return f"{base.rstrip('/')}/gen-{self.generation}"

    @property
    def parquet(self) -> str:
        return self._parquet or str(self.root / "accounts.parquet")


def config(bootstrap: str, registry_url: str | None, work: Workdir, max_offsets: int | None):
    from chronik.spark.projection import ProjectionConfig

    # Events decoded by the source as Avro, in the shape of the subject's latest schema;
    # the read model stays JSON.
    return ProjectionConfig(
        bootstrap=bootstrap, events_topic=T.events, read_model_topic=T.accounts,
        dead_letter_topic=T.dead, parquet_path=work.parquet, checkpoint=work.checkpoint,
        max_offsets_per_trigger=max_offsets, value_format="avro",
        schema_registry_url=registry_url,
    )


def project(spark, bootstrap: str, registry_url: str | None, work: Workdir,
            available_now: bool, max_offsets: int | None = None,
            write_dead_letters: bool = True) -> None:
    from chronik.spark.projection import start_projection

    cfg = config(bootstrap, registry_url, work, max_offsets)
    cfg.write_dead_letters = write_dead_letters
    query = start_projection(spark, bank.BankFold(), cfg, available_now=available_now)
    query.awaitTermination()


def replay(spark, bootstrap: str, registry_url: str | None, work: Workdir) -> None:
    """Rebuild from offset 0: fresh checkpoint, fresh Parquet table; dead letters not resent."""
    if "://" in work.parquet:
        jvm = spark._jvm  # the Hadoop filesystem API, for hdfs:// or s3a:// tables
        path = jvm.org.apache.hadoop.fs.Path(work.parquet)
        path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(path, True)
    else:
        shutil.rmtree(work.parquet, ignore_errors=True)
    work.next_generation()
    project(spark, bootstrap, registry_url, work, available_now=True, write_dead_letters=False)


def read_model(spark, work: Workdir) -> list:
    from chronik.spark.projection import read_model_from_parquet

    return sorted(read_model_from_parquet(spark, work.parquet, "account_id").collect())


def events_by_channel(spark, bootstrap: str, registry_url: str | None) -> list[tuple[str, int]]:
    """The events topic read as typed rows: how many events came through each channel
    (events written under schema version 1 read as v2's default, 'branch')."""
    reader = (spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", T.events).option("valueFormat", "avro")
              .option("decodeErrorMode", "null"))
    if registry_url:
        reader = reader.option("schemaRegistryUrl", registry_url)
    rows = reader.load().where("value is not null").groupBy("value.channel").count().collect()
    return sorted((r.channel, r["count"]) for r in rows)


def broker_registry(bootstrap: str, given: str | None) -> str:
    """The registry URL given, else the one the broker serves (its schema.registry.listen)."""
    from chronik.spark.options import OptionError
    from chronik.spark.registry_discovery import registry_url

    options = {"schemaRegistryUrl": given} if given else {}
    try:
        return registry_url(options, {"bootstrap.servers": bootstrap})
    except OptionError as exc:
        raise SystemExit(f"{exc}; give --schema-registry-url") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command",
                        choices=["demo", "generate", "project", "replay", "show", "tellers"])
    parser.add_argument("--bootstrap-server", help="default: start an embedded chronik broker")
    parser.add_argument("--schema-registry-url", help="default: the registry the broker "
                        "serves (its schema.registry.listen)")
    parser.add_argument("--http-url", help="the broker's HTTP API, for tellers "
                        "(default: http://127.0.0.1:8080 with --bootstrap-server)")
    parser.add_argument("--tellers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--workdir", default="bank-demo")
    parser.add_argument("--master", help="Spark master; spark-submit sets it, else local[*]")
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--topic-prefix", default="bank")
    parser.add_argument("--checkpoint", help="checkpoint root URI (default: in --workdir)")
    parser.add_argument("--parquet", help="read-model table URI (default: in --workdir)")
    args = parser.parse_args(argv)
    global T
    T = Topics(args.topic_prefix)
    work = Workdir(args.workdir, args.checkpoint, args.parquet)

    if args.command == "tellers":
        server = None
        bootstrap, http_url = args.bootstrap_server, args.http_url or "http://127.0.0.1:8080"
        registry = args.schema_registry_url
        if bootstrap is None:  # tellers need the HTTP API: a `chronik serve` of our own
            server, bootstrap, http_url, registry = serve_with_http(work.root / "broker-data")
        try:
            create_topics(bootstrap)
            registry = broker_registry(bootstrap, registry)
            return 0 if tellers(bootstrap, http_url, registry, args.accounts, args.tellers,
                                args.seconds, args.seed) else 1
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)

    embedded = None
    bootstrap, registry = args.bootstrap_server, args.schema_registry_url
    if bootstrap is None:
        from chronik.broker.embedded import EmbeddedBroker

        embedded = EmbeddedBroker(data_dir=work.root / "broker-data",
                                  config={"schema.registry.listen": "127.0.0.1:0"}).start()
        bootstrap = embedded.bootstrap
        registry = f"http://127.0.0.1:{embedded.broker.registry_port}"
        print(f"chronik broker on {bootstrap}, schema registry on {registry}, "
              f"data in {work.root / 'broker-data'}")
    try:
        create_topics(bootstrap)
        registry = broker_registry(bootstrap, registry)
        if args.command == "generate":
            n = produce_history(bootstrap, registry, args.accounts, args.events, args.seed)
            print(f"produced {n}")
            return 0
        spark = spark_session(args.master)
        if args.command == "project":
            project(spark, bootstrap, registry, work, args.available_now,
                    args.max_offsets_per_trigger)
        elif args.command == "replay":
            replay(spark, bootstrap, registry, work)
        if args.command == "demo":
            if event_count(bootstrap):
                print(f"{T.events} already holds {event_count(bootstrap)} events; not adding more")
            else:
                n = produce_history(bootstrap, registry, args.accounts, args.events, args.seed)
                print(f"produced {n} events to {T.events}")
            project(spark, bootstrap, registry, work, available_now=True,
                    max_offsets=args.max_offsets_per_trigger)
            channels = ", ".join(f"{c} {n}" for c, n in events_by_channel(spark, bootstrap,
                                                                           registry))
            print(f"events by channel, read as schema version 2: {channels}")
            live = read_model(spark, work)
            replay(spark, bootstrap, registry, work)
            same = live == read_model(spark, work)
            print(f"replay from offset 0 gives the same read model: {same}")
        if args.command in ("show", "demo", "project", "replay"):
            rows = read_model(spark, work)
            for row in rows[:20]:
                print(f"{row.account_id:>8} {row.status:>6} balance={row.balance:>9} "
                      f"version={row.version:>4} last={row.last_event_time}")
            dead = (spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", T.dead).load().count())
            print(f"{len(rows)} accounts in {work.parquet}; {dead} events in {T.dead}")
        return 0
    finally:
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    raise SystemExit(main())
