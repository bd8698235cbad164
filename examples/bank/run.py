"""The bank-account projection, runnable: ``python examples/bank/run.py demo``.

Commands:
  demo      start a broker (unless --bootstrap-server), generate events, project, replay, compare
  generate  produce a reproducible bank history to the events topic
  project   run the projection (continuous, or --available-now to stop when caught up)
  replay    rebuild the read model from offset 0 on a fresh checkpoint
  show      print the read model from Parquet and the number of dead letters
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import chronik  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))

import bank  # noqa: E402


class Topics:
    def __init__(self, prefix: str = "bank"):
        self.events = f"{prefix}.events"
        self.accounts = f"{prefix}.accounts"  # the read model, compacted
        self.dead = f"{prefix}.dead-letters"


T = Topics()


def create_topics(bootstrap: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [
        NewTopic(T.events, partitions, 1),
        NewTopic(T.accounts, partitions, 1, config={"cleanup.policy": "compact"}),
        NewTopic(T.dead, 1, 1),
    ]
    existing = admin.list_topics(timeout=30).topics
    missing = [t for t in wanted if t.topic not in existing]
    for f in (admin.create_topics(missing) if missing else {}).values():
        f.result(30)


def produce_history(bootstrap: str, accounts: int, events: int, seed: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "enable.idempotence": True})
    history = bank.generate(accounts, events, seed)
    for key, value in history:
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
        {"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("WARN")
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


def config(bootstrap: str, work: Workdir, max_offsets: int | None):
    from chronik.spark.projection import ProjectionConfig

    return ProjectionConfig(
        bootstrap=bootstrap, events_topic=T.events, read_model_topic=T.accounts,
        dead_letter_topic=T.dead, parquet_path=work.parquet, checkpoint=work.checkpoint,
        max_offsets_per_trigger=max_offsets,
    )


def project(spark, bootstrap: str, work: Workdir, available_now: bool,
            max_offsets: int | None = None, write_dead_letters: bool = True) -> None:
    from chronik.spark.projection import start_projection

    cfg = config(bootstrap, work, max_offsets)
    cfg.write_dead_letters = write_dead_letters
    query = start_projection(spark, bank.BankFold(), cfg, available_now=available_now)
    query.awaitTermination()


def replay(spark, bootstrap: str, work: Workdir) -> None:
    """Rebuild from offset 0: fresh checkpoint, fresh Parquet table; dead letters not resent."""
    if "://" in work.parquet:
        jvm = spark._jvm  # the Hadoop filesystem API, for hdfs:// or s3a:// tables
        path = jvm.org.apache.hadoop.fs.Path(work.parquet)
        path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(path, True)
    else:
        shutil.rmtree(work.parquet, ignore_errors=True)
    work.next_generation()
    project(spark, bootstrap, work, available_now=True, write_dead_letters=False)


def read_model(spark, work: Workdir) -> list:
    from chronik.spark.projection import read_model_from_parquet

    return sorted(read_model_from_parquet(spark, work.parquet, "account_id").collect())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["demo", "generate", "project", "replay", "show"])
    parser.add_argument("--bootstrap-server", help="default: start an embedded chronik broker")
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

    embedded = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        from chronik.broker.embedded import EmbeddedBroker

        embedded = EmbeddedBroker(data_dir=work.root / "broker-data").start()
        bootstrap = embedded.bootstrap
        print(f"chronik broker on {bootstrap}, data in {work.root / 'broker-data'}")
    try:
        create_topics(bootstrap)
        if args.command == "generate":
            print(f"produced {produce_history(bootstrap, args.accounts, args.events, args.seed)}")
            return 0
        spark = spark_session(args.master)
        if args.command == "project":
            project(spark, bootstrap, work, args.available_now, args.max_offsets_per_trigger)
        elif args.command == "replay":
            replay(spark, bootstrap, work)
        if args.command == "demo":
            if event_count(bootstrap):
                print(f"{T.events} already holds {event_count(bootstrap)} events; not adding more")
            else:
                n = produce_history(bootstrap, args.accounts, args.events, args.seed)
                print(f"produced {n} events to {T.events}")
            project(spark, bootstrap, work, available_now=True,
                    max_offsets=args.max_offsets_per_trigger)
            live = read_model(spark, work)
            replay(spark, bootstrap, work)
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
