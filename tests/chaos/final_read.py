"""The final read of a chaos run, taken after the network is healed and every broker is
back, and saved so that a run can be checked again offline (chaos.checker).

Files, under ``<out_dir>/final/``:

- ``state.json``: ``{"time", "errors": [text], "partitions": {"<topic>/<p>": {"topic",
  "partition", "leader", "leader_epoch", "isr", "replicas", "full_isr",
  "high_watermark", "last_stable_offset", "adding", "removing", "orphans", "files":
  {"<broker id>": "<path under final/>"}}}, "committed": {"<group>": {"<topic>/<p>": offset}},
  "fetched": {"<topic>": ["read_uncommitted", ...]}, "moved_during_read": [text]}``
  (marks that still moved while the last attempt read; empty normally). ``high_watermark`` and
  ``last_stable_offset`` are what the leader answered to ListOffsets (read_uncommitted
  and read_committed); ``full_isr`` is false when the partition did not get every
  replica back in its ISR in time (``isr`` is then what it had). ``replicas`` is the
  assignment at the end (ZooKeeper's topic znode): a replica a reassignment removed is
  not expected anywhere; ``adding``/``removing`` are the replicas a reassignment still
  in progress adds and removes (empty normally); ``orphans`` the brokers outside
  ``replicas`` whose data directory still holds the partition after waiting up to
  ORPHAN_WAIT_S for their copies to be deleted.
- ``replicas/<topic>-<p>/broker-<id>.log``: every whole record batch (v2, as on disk)
  of that broker's replica, in log order, concatenated: the segments' contents with
  their roll points left out, so replicas compare batch for batch.
- ``fetch/<topic>.<isolation>.jsonl``: the partition's records as a Kafka consumer
  (confluent-kafka, assigned every partition from the beginning, read to the end)
  received them from the leaders: one JSON object a line, ``{"partition", "offset",
  "key", "value", "headers": [[name, value], ...]}`` (bytes as chaos.history.text).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chronik.records.batch import BatchHeader
from chronik.records.reader import DecodedRecord, iter_batches, iter_records

from .history import text

FINAL_DIR = "final"
STATE_FILE = "state.json"
# How long a broker a reassignment took a partition from has to delete its copy.
ORPHAN_WAIT_S = 30.0


def pkey(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def split_pkey(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


# -- reading a saved final read ---------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    partition: int
    offset: int
    key: str | None
    value: str | None
    headers: tuple[tuple[str, str | None], ...] = ()

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


def batches(data: bytes) -> list[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each whole batch of a saved replica, in order."""
    return [(h, data[pos : pos + h.size]) for pos, h in iter_batches(data)]


def records(data: bytes, upto: int | None = None) -> list[DecodedRecord]:
    """The data records (control batches left out) of a saved replica below ``upto``."""
    out: list[DecodedRecord] = []
    for header, batch in batches(data):
        if upto is not None and header.base_offset >= upto:
            break
        if header.is_control:
            continue
        for record in iter_records(batch):
            if upto is not None and record.offset >= upto:
                break
            out.append(record)
    return out


def record_sessions(data: bytes, upto: int | None = None) -> dict[int, tuple[int, int]]:
    """Offset -> (producer id, producer epoch) of the batch holding each data record of
    a saved replica below ``upto``: the producer session that wrote it."""
    out: dict[int, tuple[int, int]] = {}
    for header, _ in batches(data):
        if upto is not None and header.base_offset >= upto:
            break
        if header.is_control:
            continue
        for offset in range(header.base_offset, header.last_offset + 1):
            out[offset] = (header.producer_id, header.producer_epoch)
    return out


@dataclass
class FinalRead:
    state: dict[str, Any]
    # "<topic>/<p>" -> broker id -> the replica's batches, concatenated.
    replicas: dict[str, dict[int, bytes]] = field(default_factory=dict)
    # (topic, isolation) -> records in the order received.
    fetched: dict[tuple[str, str], list[Fetched]] = field(default_factory=dict)

    @property
    def partitions(self) -> dict[str, dict[str, Any]]:
        return self.state.get("partitions", {})

    def rows(self, topic: str, isolation: str) -> list[Fetched]:
        """What a consumer got, below each partition's high watermark as sampled before
        the read: a produce request of a stopped client, held up by a cut link, can
        still land after the healing and is no part of the snapshot."""
        out = []
        for r in self.fetched.get((topic, isolation), []):
            hw = self.partitions.get(pkey(topic, r.partition), {}).get("high_watermark")
            if hw is None or r.offset < hw:
                out.append(r)
        return out

    def committed(self, group: str) -> dict[str, int]:
        return self.state.get("committed", {}).get(group, {})

    @classmethod
    def load(cls, out_dir: Path) -> FinalRead | None:
        """The saved final read of a run, or None when it was never taken."""
        base = Path(out_dir) / FINAL_DIR
        if not (base / STATE_FILE).exists():
            return None
        state = json.loads((base / STATE_FILE).read_text())
        final = cls(state)
        for key, info in state.get("partitions", {}).items():
            final.replicas[key] = {
                int(broker): (base / path).read_bytes()
                for broker, path in info.get("files", {}).items()
                if (base / path).exists()
            }
        for topic, isolations in state.get("fetched", {}).items():
            for isolation in isolations:
                path = base / "fetch" / f"{topic}.{isolation}.jsonl"
                rows: list[Fetched] = []
                if path.exists():
                    for line in path.read_text().splitlines():
                        if line.strip():
                            d = json.loads(line)
                            rows.append(Fetched(
                                d["partition"], d["offset"], d["key"], d["value"],
                                tuple((h[0], h[1]) for h in d.get("headers", [])),
                            ))
                final.fetched[(topic, isolation)] = rows
        return final


# -- taking it from a live cluster ------------------------------------------------------


def group_offsets(admin: Any, group: str, timeout: float = 10.0) -> dict[str, int]:
    """``"<topic>/<p>" -> committed offset`` of ``group`` (partitions without one left
    out), asked of the group's coordinator."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout
    )
    result = futures[group].result(timeout=timeout + 5)
    return {
        pkey(tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions or []
        if tp.error is None and tp.offset >= 0
    }


def watermarks(bootstrap: str, topics: Mapping[str, int], isolation: str) -> dict[str, int]:
    """``"<topic>/<p>" -> `` the end a consumer of ``isolation`` sees: the high watermark
    (read_uncommitted) or the last stable offset (read_committed), as the leaders answer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final-read",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        return {
            pkey(t, p): int(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10,
                                                           cached=False)[1])
            for t, n in topics.items() for p in range(n)
        }
    finally:
        consumer.close()


def _wait_stable(
    bootstrap: str, topics: Mapping[str, int], committed_topics: Iterable[str], timeout: float
) -> tuple[dict[str, int], dict[str, int], bool]:
    """High watermarks and last stable offsets once no transaction is open on the
    transactional topics and the marks hold still (a coordinator may still be writing
    the abort markers of a transaction its producer left open)."""
    committed_topics = set(committed_topics)
    deadline = time.monotonic() + timeout
    previous: dict[str, int] | None = None
    while True:
        try:
            high = watermarks(bootstrap, topics, "read_uncommitted")
            stable = watermarks(bootstrap, topics, "read_committed")
        except Exception:  # noqa: BLE001 - a broker still electing answers errors
            high, stable = {}, {}
        settled = bool(high) and high == previous and all(
            stable.get(k) == v for k, v in high.items() if split_pkey(k)[0] in committed_topics
        )
        if settled or time.monotonic() > deadline:
            return high, stable, settled
        previous = high or None
        time.sleep(1.0)


def _fetch(bootstrap: str, topics: Mapping[str, int], isolation: str,
           timeout: float) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Every record of ``topics`` as one consumer gets them, per topic; and the topics
    it could not read to the end of every partition in time."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "chaos-final-read",
        "isolation.level": isolation, "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in topics}
    wanted = {(t, p) for t, n in topics.items() for p in range(n)}
    at_end: set[tuple[str, int]] = set()
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(wanted)])
        deadline = time.monotonic() + timeout
        while at_end < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add((msg.topic(), msg.partition()))
                    continue
                rows[msg.topic()].append({
                    "partition": msg.partition(), "offset": msg.offset(),
                    "key": text(msg.key()), "value": text(msg.value()),
                    "headers": [[k, text(v)] for k, v in (msg.headers() or [])],
                })
    finally:
        consumer.close()
    return rows, sorted({t for t, p in wanted - at_end})


def take_final_read(
    cluster: Any,
    out_dir: Path,
    topics: Mapping[str, int],
    committed_topics: Iterable[str] = (),
    groups: Iterable[str] = (),
    timeout: float = 120.0,
) -> FinalRead:
    """Wait for every partition of ``topics`` (name -> partition count) to be led with
    its full ISR, then save what each replica holds, what the leaders serve
    (read_committed too for ``committed_topics``) and the groups' committed offsets.
    What cannot be had in ``timeout`` is noted in ``errors`` rather than raised: the
    checker reports it."""
    from confluent_kafka.admin import AdminClient

    base = Path(out_dir) / FINAL_DIR
    base.mkdir(parents=True, exist_ok=True)
    committed_topics = list(committed_topics)
    errors: list[str] = []
    full: dict[str, bool] = {}
    for topic, n in topics.items():
        try:
            cluster.wait_full_isr(topic, n, timeout)
            full[topic] = True
        except AssertionError as exc:
            errors.append(str(exc))
            full[topic] = False
    # A request of a stopped client held up by a cut link may still land; the read is
    # taken again while the marks move under it (the checker keeps below the marks).
    moved: list[str] = []
    for _ in range(3):
        high, stable, settled = _wait_stable(cluster.bootstrap, topics, committed_topics, 60.0)
        partitions, problems = _save_replicas(cluster, base, topics, full, high, stable)
        fetched, unfinished = _save_fetches(cluster.bootstrap, base, topics, committed_topics,
                                            timeout)
        after = watermarks(cluster.bootstrap, topics, "read_uncommitted")
        moved = [f"{k}: {v} -> {after.get(k)}" for k, v in high.items() if after.get(k) != v]
        if not moved:
            break
    errors += problems + unfinished
    if not settled:
        errors.append("the high watermarks or last stable offsets did not settle in 60s")

    committed: dict[str, dict[str, int]] = {}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for group in groups:
        try:
            committed[group] = group_offsets(admin, group, 15.0)
        except Exception as exc:  # noqa: BLE001 - noted, the checker reports it
            errors.append(f"committed offsets of group {group}: {exc!r}")

    state = {
        "time": time.time(), "errors": errors, "partitions": partitions,
        "committed": committed, "fetched": fetched, "moved_during_read": moved,
    }
    (base / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True))
    loaded = FinalRead.load(out_dir)
    assert loaded is not None
    return loaded


def _save_replicas(
    cluster: Any, base: Path, topics: Mapping[str, int], full: Mapping[str, bool],
    high: Mapping[str, int], stable: Mapping[str, int],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each replica's batches into replicas/, and the partitions' entries of state.json."""
    from integration.replica_check import replica_batches

    errors: list[str] = []
    partitions: dict[str, dict[str, Any]] = {}
    orphans = _orphans(cluster, topics, ORPHAN_WAIT_S)
    for topic, n in topics.items():
        assignment = cluster.assignment(topic)
        moving = cluster.moving(topic)
        for p in range(n):
            key = pkey(topic, p)
            zk_state = cluster.partition_state(topic, p)
            adding, removing = moving.get(p, ([], []))
            info: dict[str, Any] = {
                "topic": topic, "partition": p,
                "leader": zk_state["leader"], "leader_epoch": zk_state.get("leader_epoch"),
                "isr": sorted(zk_state["isr"]), "replicas": list(assignment[p]),
                "full_isr": full[topic] and sorted(zk_state["isr"]) == sorted(assignment[p]),
                "high_watermark": high.get(key), "last_stable_offset": stable.get(key),
                "adding": adding, "removing": removing, "orphans": orphans.get(key, []),
                "files": {},
            }
            for broker_id in assignment[p]:
                src = cluster.broker(broker_id).data_dir / f"{topic}-{p}"
                rel = f"replicas/{topic}-{p}/broker-{broker_id}.log"
                (base / rel).parent.mkdir(parents=True, exist_ok=True)
                data = b"".join(b for _, b in replica_batches(src)) if src.is_dir() else b""
                if not src.is_dir():
                    errors.append(f"{key}: no replica directory on broker {broker_id}")
                (base / rel).write_bytes(data)
                info["files"][str(broker_id)] = rel
            partitions[key] = info
    return partitions, errors


def _orphans(cluster: Any, topics: Mapping[str, int], timeout: float) -> dict[str, list[int]]:
    """``"<topic>/<p>" ->`` the brokers outside the partition's replicas whose data
    directory still holds it, once ``timeout`` has passed (or none is left)."""
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, list[int]] = {}
        for topic, n in topics.items():
            assignment = cluster.assignment(topic)
            for p in range(n):
                held = [i for i in cluster.ids if i not in assignment[p]
                        and (cluster.broker(i).data_dir / f"{topic}-{p}").exists()]
                if held:
                    found[pkey(topic, p)] = held
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def _save_fetches(
    bootstrap: str, base: Path, topics: Mapping[str, int], committed_topics: list[str],
    timeout: float,
) -> tuple[dict[str, list[str]], list[str]]:
    """What consumers get, read_uncommitted and (for ``committed_topics``) read_committed
    at once, into fetch/; the isolations saved per topic, and what was not read whole."""
    errors: list[str] = []
    fetched: dict[str, list[str]] = {}
    (base / "fetch").mkdir(exist_ok=True)
    reads = {"read_uncommitted": dict(topics),
             "read_committed": {t: n for t, n in topics.items() if t in committed_topics}}
    with ThreadPoolExecutor(len(reads)) as pool:
        done = {isolation: pool.submit(_fetch, bootstrap, wanted, isolation, timeout)
                for isolation, wanted in reads.items() if wanted}
    for isolation, future in done.items():
        rows, unfinished = future.result()
        for topic in unfinished:
            errors.append(f"{topic}: a {isolation} read did not reach every partition's end")
        for topic, topic_rows in rows.items():
            with open(base / "fetch" / f"{topic}.{isolation}.jsonl", "w") as f:
                for row in topic_rows:
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
            fetched.setdefault(topic, []).append(isolation)
    return fetched, errors
