"""A full disk, for real: the data dir on a 64 MiB tmpfs, filled until produces fail.

While full, produces get KAFKA_STORAGE_ERROR (a Kafka error code, the connection stays
up), commits NOT_COORDINATOR, CreateTopics an error code, and reads go on. Once space
returns, without a restart, writes resume and every acknowledged record reads back at
its acknowledged offset. SIGTERM on a full disk exits 0 and leaves no temporary files,
and after a restart every acknowledged record is still there.
"""

from __future__ import annotations

import datetime
import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.produce.v9 import request as produce_v9
from tests.conftest import BrokerProcess

from chronik.records.builder import Record, build_batch

from .helpers import confluent_read, create_topic
from .rawclient import RawClient

KAFKA_STORAGE_ERROR = 56
NOT_COORDINATOR = 16
TOPIC = "events"
VALUE_SIZE = 8 * 1024


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def broker_on(tmpfs: Path, tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmpfs / "data", {"log.segment.bytes": str(4 << 20)})
    proc.log_path = tmp_path / "broker.log"  # not on the disk that fills up
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()  # before the tmpfs fixture unmounts


def fill(mnt: Path) -> Path:
    """Write a filler file until the filesystem is full."""
    filler = mnt / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 64 << 10, 4 << 10, 1):
            try:
                while True:
                    f.write(chunk[:size])
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


class Producer:
    """confluent-kafka, acks=all; remembers what was acknowledged and at which offset."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as CKProducer

        self._producer = CKProducer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 3000,
                "retry.backoff.ms": 100,
            }
        )
        self.acked: dict[int, bytes] = {}
        self.failed: list[bytes] = []

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is None:
            assert msg.offset() not in self.acked
            self.acked[msg.offset()] = msg.value()
        else:
            self.failed.append(msg.value())

    def send(self, count: int) -> tuple[int, int]:
        """Produce ``count`` unique records; (acknowledged, failed) among them."""
        acked, failed = len(self.acked), len(self.failed)
        for _ in range(count):
            value = uuid.uuid4().bytes * (VALUE_SIZE // 16)
            self._producer.produce(TOPIC, value=value, on_delivery=self._on_delivery)
            self._producer.poll(0)
        assert self._producer.flush(30) == 0
        return len(self.acked) - acked, len(self.failed) - failed


def raw_produce(bootstrap: str, topic: str) -> int:
    """One acks=all produce over a raw connection: the partition's error code."""
    batch = build_batch([Record(0, None, b"raw" * 1000)])
    request = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            produce_v9.TopicProduceData(
                name=topic,
                partition_data=(produce_v9.PartitionProduceData(index=0, records=batch),),
            ),
        ),
    )
    with RawClient(bootstrap) as client:
        response = client.request(request)
    return int(response.responses[0].partition_responses[0].error_code)


def raw_commit(bootstrap: str) -> int:
    request = commit_v8.OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            commit_v8.OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    commit_v8.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=1,
                        committed_leader_epoch=-1,
                        committed_metadata="m" * 2000,
                    ),
                ),
            ),
        ),
    )
    with RawClient(bootstrap) as client:
        response = client.request(request)
    return int(response.topics[0].partitions[0].error_code)


def raw_create_topic(bootstrap: str, name: str) -> int:
    request = create_v7.CreateTopicsRequest(
        topics=(
            create_v7.CreatableTopic(
                name=name,
                num_partitions=4,
                replication_factor=1,
                assignments=(),
                configs=(),
            ),
        ),
        timeout=datetime.timedelta(seconds=5),
        validate_only=False,
    )
    with RawClient(bootstrap) as client:
        response = client.request(request)
    return int(response.topics[0].error_code)


def stored(bootstrap: str, expected: int) -> dict[int, bytes]:
    return {g.offset: g.value for g in confluent_read(bootstrap, TOPIC, 1, expected, timeout=20)}


def assert_acked_in_place(bootstrap: str, acked: dict[int, bytes]) -> None:
    got = stored(bootstrap, max(acked) + 1)
    wrong = [o for o, v in acked.items() if got.get(o) != v]
    assert not wrong, f"{len(wrong)} acknowledged offsets read back other records: {wrong[:5]}"


def test_full_disk_gives_error_codes_and_loses_no_acknowledged_record(broker_on, tmpfs):
    bootstrap = broker_on.bootstrap
    create_topic(bootstrap, TOPIC)
    producer = Producer(bootstrap)
    assert producer.send(200) == (200, 0)

    filler = fill(tmpfs)
    # Nothing more fits: produces fail with a Kafka error code, the connection stays up.
    producer.send(50)
    assert raw_produce(bootstrap, TOPIC) == KAFKA_STORAGE_ERROR
    assert raw_commit(bootstrap) == NOT_COORDINATOR
    assert raw_create_topic(bootstrap, "made-while-full") != 0
    assert_acked_in_place(bootstrap, producer.acked)  # reads go on

    # Space is back, no restart: writes resume where the log really ends.
    filler.unlink()
    assert raw_produce(bootstrap, TOPIC) == 0
    acked, _ = producer.send(100)
    assert acked == 100
    assert_acked_in_place(bootstrap, producer.acked)
    unacked = set(producer.failed)
    got = stored(bootstrap, max(producer.acked) + 1)
    assert not [o for o, v in got.items() if v in unacked and o in producer.acked]
    log = broker_on.log_text()
    failed = f"partition {TOPIC}-0: write failed: No space left on device"
    assert log.count(failed) == 1, log[-3000:]
    assert log.count(f"partition {TOPIC}-0: writes resumed") == 1
    assert "Traceback" not in log, log[-3000:]

    # SIGTERM while full: a clean exit and no temporary files left behind.
    filler = fill(tmpfs)
    assert broker_on.terminate() == 0, broker_on.log_text()[-3000:]
    assert not [p for p in (tmpfs / "data").rglob("*.tmp")]
    assert not [p for p in (tmpfs / "data").rglob("*.tmp*")]
    assert broker_on.log_text().count("not closed cleanly") == 1
    filler.unlink()
    broker_on.start()
    assert_acked_in_place(bootstrap, producer.acked)
    assert producer.send(20) == (20, 0)
    assert_acked_in_place(bootstrap, producer.acked)
