"""The sink log: what an exactly-once writer has written, kept in Kafka beside the data.

One single-partition topic per sink, ``_chronik_sink.<sink id>``. Its records, JSON values:

- key ``intent``: ``{"batch": N, "task": T, "ends": {"topic": {"0": off}}}``, written by a task
  before it writes any row of batch N, with the target partitions' end offsets at that moment;
- key ``commit``: ``{"batch": N}``, written by the driver once every task of batch N succeeded.

Every row the sink writes carries the header ``chronik.sink`` =
``<sink id>/<batch>/<task>/<digest>.<n>``: a digest of the row's topic, partition, key, value and
headers, and n counting identical rows in the task's input. The identity does not depend on row
order, which a replayed batch (out of a shuffle) need not keep. A replayed batch that is already
committed writes nothing; a task of a batch with intents from an earlier attempt first scans
the target from those offsets and skips as many copies of each row as it finds there (from
any task: a replay may split rows into tasks differently). The one case this cannot tell
apart: identical rows in two tasks of one batch, written by one task before a crash.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronik.spark.arrow_read import read_range
from chronik.spark.offsets import OffsetPlanner, from_json_offsets, to_json_offsets
from chronik.spark.options import SINK_LOG_PREFIX, Subscription, quiet

HEADER = "chronik.sink"
_TAIL_CHUNK = 1024


def log_topic(sink_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in sink_id)
    return f"{SINK_LOG_PREFIX}{safe}"[:249]


@dataclass
class SinkState:
    last_commit: int = -1
    intents: list[dict] = field(default_factory=list)  # intents written after the last commit


def ensure_log(admin: AdminClient, topic: str, timeout_s: float = 30) -> None:
    found = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if found is not None and found.error is None:
        return
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "delete"})], request_timeout=timeout_s
    )
    for f in futures.values():
        try:
            f.result()
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def read_state(kafka: dict[str, str], topic: str) -> SinkState:
    """Scan the log backwards from its end until the last commit record."""
    conf = {"group.id": "chronik-sink-log", "enable.auto.commit": "false", **kafka}
    conf["enable.partition.eof"] = "true"
    probe = Consumer(quiet(conf))
    try:
        _, high = probe.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=30)
    finally:
        probe.close()
    state = SinkState()
    end = high
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        rows = []
        for batch in read_range(conf, topic, 0, start, end, fail_on_data_loss=False):
            rows.extend(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                            strict=True))
        for key, value in reversed(rows):
            record = json.loads(value)
            if key == b"commit":
                state.last_commit = record["batch"]
                return state
            state.intents.append(record)
        end = start
    return state


def write_record(producer: Producer, topic: str, key: str, record: dict) -> None:
    errors: list = []
    producer.produce(
        topic, key=key, value=json.dumps(record),
        on_delivery=lambda err, _msg: err and errors.append(err),
    )
    producer.flush()
    if errors:
        raise KafkaException(errors[0])


def intent(batch: int, task: int, ends: dict) -> dict:
    return {"batch": batch, "task": task, "ends": to_json_offsets(ends)}


def row_identity(
    topic: str | None,
    partition: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> str:
    digest = hashlib.blake2b(digest_size=12)

    def add(data: bytes | None) -> None:
        if data is None:
            digest.update(b"\xff\xff\xff\xff")  # null, unlike any length
        else:
            digest.update(len(data).to_bytes(4, "big"))
            digest.update(data)

    add(None if topic is None else topic.encode())
    add(None if partition is None else str(partition).encode())
    add(key)
    add(value)
    for name, data in headers:
        add(name.encode())
        add(data)
    return digest.hexdigest()


def written_seqs(
    kafka: dict[str, str], state: SinkState, marker: str, batch: int, task: int
) -> Counter[str]:
    """Row digests earlier attempts of ``batch`` already wrote, with how often: scanned from
    the offsets in the batch's intents. Every task of the batch counts, not only ``task``: a
    replayed batch may split its rows into tasks differently (adaptive query execution
    coalesces partitions by size), so a row's earlier writer may have had another task id."""
    starts: dict = {}
    for rec in state.intents:
        if rec["batch"] == batch:
            for tp, off in from_json_offsets(rec["ends"]).items():
                starts[tp] = min(off, starts.get(tp, off))
    written: Counter[str] = Counter()
    if not starts:
        return written
    ends = OffsetPlanner(kafka, Subscription(topics=tuple({t for t, _ in starts}))).latest(starts)
    conf = {"group.id": "chronik-sink-scan", "enable.auto.commit": "false", **kafka}
    prefix = f"{marker}/{batch}/".encode()
    for (topic, part), start in starts.items():
        for rb in read_range(conf, topic, part, start, ends[(topic, part)], include_headers=True,
                             fail_on_data_loss=False):
            for headers in rb.column("headers").to_pylist():
                for h in headers or ():
                    if h["key"] == HEADER and h["value"].startswith(prefix):
                        # <task>/<digest>.<n>
                        ident = h["value"][len(prefix):].decode().split("/", 1)[-1]
                        written[ident.rsplit(".", 1)[0]] += 1
    return written
