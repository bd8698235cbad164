"""The bank-account projection: its read model, its replay, its dead letters, and a kill -9."""

from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle

BANK = Path(__file__).resolve().parents[2] / "examples" / "bank"
sys.path.insert(0, str(BANK))
bank = importlib.import_module("bank")
run = importlib.import_module("run")
cloudpickle.register_pickle_by_value(bank)  # Spark's workers get the domain code by value

from chronik.spark.projection import (  # noqa: E402
    ProjectionConfig,
    read_model_from_parquet,
    read_model_from_topic,
    start_projection,
)

pytestmark = pytest.mark.spark

FIELDS = ("account_id", "owner", "status", "balance", "version", "last_event_id")


def _setup(bootstrap: str, events: int, accounts: int = 25):
    prefix = f"bank-{uuid.uuid4().hex[:8]}"
    run.T = run.Topics(prefix)
    run.create_topics(bootstrap)
    run.produce_history(bootstrap, accounts, events, seed=11)
    history = bank.generate(accounts, events, seed=11)
    return prefix, history


def _cfg(bootstrap: str, prefix: str, work: Path, gen: int = 0, max_offsets: int = 300):
    topics = run.Topics(prefix)
    return ProjectionConfig(
        bootstrap=bootstrap, events_topic=topics.events, read_model_topic=topics.accounts,
        dead_letter_topic=topics.dead, parquet_path=str(work / "accounts.parquet"),
        checkpoint=str(work / "checkpoints" / f"gen-{gen}"), max_offsets_per_trigger=max_offsets,
    )


def _as_dicts(rows) -> dict[str, tuple]:
    return {r.account_id: tuple(getattr(r, f) for f in FIELDS) for r in rows}


def _expected(history) -> dict[str, tuple]:
    return {acc: tuple(s.get(f) for f in FIELDS)
            for acc, s in bank.expected_read_model(history).items()}


def _dead_letters(spark, bootstrap: str, topic: str):
    return (spark.read.format("chronik").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load().collect())


def _header(row, name: str) -> bytes | None:
    return dict((h.key, h.value) for h in row.headers).get(name)


def _bad_events(history) -> int:
    fold, bad = bank.BankFold(), 0
    states: dict = {}
    for key, value in history:
        try:
            states[key] = fold.apply(states.get(key), fold.parse(key, value))
        except Exception:  # noqa: BLE001
            bad += 1
    return bad


def _run_to_end(spark, cfg: ProjectionConfig) -> None:
    query = start_projection(spark, bank.BankFold(), cfg, available_now=True)
    query.awaitTermination(300)
    assert query.exception() is None


def test_projection_read_model_dead_letters_and_replay(spark, bootstrap, tmp_path):
    prefix, history = _setup(bootstrap, events=1200)
    cfg = _cfg(bootstrap, prefix, tmp_path)
    _run_to_end(spark, cfg)
    expected = _expected(history)
    assert _as_dicts(read_model_from_parquet(spark, cfg.parquet_path, "account_id").collect()) \
        == expected
    from_topic = read_model_from_topic(spark, bootstrap, cfg.read_model_topic,
                                       bank.READ_MODEL_SCHEMA).collect()
    assert _as_dicts(from_topic) == expected
    dead = _dead_letters(spark, bootstrap, cfg.dead_letter_topic)
    assert len(dead) == _bad_events(history) > 0
    reasons = [_header(r, "error").decode() for r in dead]
    assert all(_header(r, "chronik.sink") for r in dead)  # written by the exactly-once sink
    assert any("JSONDecodeError" in r for r in reasons)
    assert any("insufficient funds" in r for r in reasons)

    # Replay: a fresh checkpoint from offset 0 rebuilds an identical read model.
    import shutil

    shutil.rmtree(cfg.parquet_path)
    replay = _cfg(bootstrap, prefix, tmp_path, gen=1, max_offsets=700)
    replay.write_dead_letters = False
    _run_to_end(spark, replay)
    assert _as_dicts(read_model_from_parquet(spark, replay.parquet_path, "account_id").collect()) \
        == expected
    assert len(_dead_letters(spark, bootstrap, cfg.dead_letter_topic)) == len(dead)


class _EndOffset:
    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer, TopicPartition

        self.probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
        self.tp = TopicPartition(topic, 0)

    def __call__(self) -> int:
        return self.probe.get_watermark_offsets(self.tp, timeout=10)[1]

    def close(self) -> None:
        self.probe.close()


@pytest.mark.slow
def test_killed_projection_ends_like_an_uninterrupted_one(spark, bootstrap, tmp_path):
    """Killed right after a micro-batch wrote dead letters and before it committed: the riskiest
    moment for the sinks, whose replay must not write those rows again."""
    prefix, history = _setup(bootstrap, events=600)
    work = tmp_path / "work"
    cfg = _cfg(bootstrap, prefix, work, max_offsets=60)
    # Without the parent's gateway variables the child starts a JVM of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    log = open(tmp_path / "projection.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(BANK / "run.py"), "project", "--bootstrap-server", bootstrap,
         "--workdir", str(work), "--topic-prefix", prefix, "--master", "local[1]",
         "--max-offsets-per-trigger", "60"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log.close()
    dead_letters = _EndOffset(bootstrap, cfg.dead_letter_topic)
    try:
        deadline = time.monotonic() + 240
        parquet = Path(cfg.parquet_path)
        seen = 0
        while time.monotonic() < deadline:
            batches = len(list(parquet.glob("batch_id=*/_SUCCESS"))) if parquet.exists() else 0
            dead = dead_letters()
            if (batches >= 2 and dead > seen) or batches >= 8:
                break  # dead letters of a batch that is still running (or, failing that, any)
            seen = dead
            if proc.poll() is not None:
                pytest.fail("the projection exited early:\n"
                            + (tmp_path / "projection.log").read_text(errors="replace")[-3000:])
            time.sleep(0.005)
        else:
            pytest.fail("the projection made no progress in 240s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # kill -9, mid-stream, with its JVM
        proc.wait()
        dead_letters.close()
    # Spark's Python workers run in process groups of their own and exit once they notice
    # their JVM is gone; a worker still writing would race the replay.
    time.sleep(1)
    # Restarted on the same checkpoint; bigger batches after the replayed one, to finish sooner.
    _run_to_end(spark, dataclasses.replace(cfg, max_offsets_per_trigger=600))
    expected = _expected(history)
    assert _as_dicts(read_model_from_parquet(spark, cfg.parquet_path, "account_id").collect()) \
        == expected
    from_topic = read_model_from_topic(spark, bootstrap, cfg.read_model_topic,
                                       bank.READ_MODEL_SCHEMA).collect()
    assert _as_dicts(from_topic) == expected
    sources = Counter(_header(r, "source") for r in
                      _dead_letters(spark, bootstrap, cfg.dead_letter_topic))
    assert [s for s, n in sources.items() if n > 1] == []
    assert sum(sources.values()) == _bad_events(history)
