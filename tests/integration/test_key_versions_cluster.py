"""Per-key versions in a cluster: three brokers, a topic with key.versioning.enable=true,
replication factor 3 and min.insync.replicas=2. Conditional appends go through the
leader (confluent-kafka, acks=all, partitioner murmur2_random); every replica's key
index agrees with its own log and with the other replicas' (followers index the
versions in the leader's chronik-version headers, never numbering records themselves);
after the leader is killed with SIGKILL the new leader goes on with the right versions,
no gap, no duplicate, a stale expected version refused; the HTTP API of a broker that
does not lead a key's partition forwards the request to the leader's and passes its
answer back (a request already forwarded is answered 421 naming the leader).

The indexes are read from each broker's key-versions.db through KeyIndex on a read-only
connection while the brokers run (the file is WAL; a reader sees the last committed
transaction), the logs from the segment files (replica_check)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from chronik.records.partitioner import partition_for_key
from chronik.records.reader import iter_records
from chronik.records.versions import EXPECTED_HEADER, VERSION_HEADER
from chronik.storage.key_index import FILE_NAME as KEY_INDEX_FILE
from chronik.storage.key_index import KeyIndex
from conftest import free_port

from .cluster_support import Cluster, wait_until
from .helpers import topic_name
from .replica_check import replica_batches
from .replication_support import REPLICATION_CONFIG, create_replicated_topic, isr, leader

PARTITIONS = 3
INVALID_RECORD = 87
KEYS = [f"acct-{i}".encode() for i in range(6)]


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("kv-cluster"), zookeeper.connect, 3, REPLICATION_CONFIG)
    for b in c.brokers.values():
        b.config["http.listen"] = f"127.0.0.1:{free_port()}"
    try:
        yield c.start()
    finally:
        c.close()


@pytest.fixture(scope="module")
def topic(cluster: Cluster) -> str:
    name = topic_name("kvc")
    create_replicated_topic(
        cluster, name, PARTITIONS,
        **{"key.versioning.enable": "true", "min.insync.replicas": "2"},
    )
    return name


class Appender:
    """One confluent-kafka producer making conditional appends, one at a time."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 0,
            "message.timeout.ms": 60000,
        })

    def append(self, topic: str, key: bytes, expected: int | None, value: bytes):
        """(error or None, partition, offset) of one record."""
        out: list = []
        headers = [] if expected is None else [(EXPECTED_HEADER, str(expected).encode())]
        self.producer.produce(topic, key=key, value=value, headers=headers,
                              on_delivery=lambda err, msg: out.append(
                                  (err, msg.partition(), msg.offset())))
        self.producer.flush(90)
        assert out, "no delivery report"
        return out[0]


def http_port(cluster: Cluster, i: int) -> int:
    return int(cluster.broker(i).config["http.listen"].rsplit(":", 1)[1])


def http_get(cluster: Cluster, i: int, path: str,
             headers: dict | None = None) -> tuple[int, dict]:
    url = f"http://127.0.0.1:{http_port(cluster, i)}{path}"
    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=40) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def http_post(cluster: Cluster, i: int, path: str, body: dict, headers: dict) -> tuple[int, dict]:
    url = f"http://127.0.0.1:{http_port(cluster, i)}{path}"
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=40) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def key_path(topic: str, key: bytes) -> str:
    return f"/v1/topics/{topic}/keys/{urllib.parse.quote(key.decode(), safe='')}"


def index_of(partition_dir: Path) -> tuple[int, dict[bytes, int], list[tuple[bytes, int, int]]]:
    """(end, counts, rows by offset) of a replica's key index, through KeyIndex's own
    queries on a connection of ours made read-only (query_only) once open: the broker
    keeps writing through its own connection (WAL allows both)."""
    index = KeyIndex(partition_dir / KEY_INDEX_FILE)
    try:
        db = index._db  # noqa: SLF001 - no read-only mode of its own
        db.execute("PRAGMA query_only=ON")
        db.execute("BEGIN")  # one snapshot for the three reads
        try:
            end = int(dict(db.execute("SELECT name, value FROM meta").fetchall()).get("end", 0))
            counts, rows = index.counts(), index.rows()
        finally:
            db.execute("COMMIT")
    finally:
        index.close()
    return end, counts, [(bytes(k), v, o) for k, v, o in rows]


def log_of(partition_dir: Path) -> tuple[int, list[tuple[bytes, int, int]]]:
    """(log end, [(key, chronik-version, offset)]) of a replica's keyed records."""
    end, rows = 0, []
    for header, data in replica_batches(partition_dir):
        end = header.last_offset + 1
        if header.is_control:
            continue
        for rec in iter_records(data):
            if rec.key is None:
                continue
            version = dict(rec.headers).get(VERSION_HEADER)
            assert version is not None, f"{partition_dir}: offset {rec.offset} has no version"
            rows.append((rec.key, int(version), rec.offset))
    return end, rows


def replica_problems(cluster: Cluster, topic: str, p: int, brokers: list[int]):
    """What is wrong with partition `p`'s replicas on `brokers` (an empty list when they
    hold the same log, and an index that agrees with it), and the key counts."""
    problems: list[str] = []
    reference = None
    for i in brokers:
        d = cluster.partition_dir(i, topic, p)
        log_end, log_rows = log_of(d)
        end, counts, rows = index_of(d)
        if end != log_end:
            problems.append(f"broker {i}: index end {end}, log end {log_end}")
            continue
        # The index is the log's keyed records, one row each, and each key's count is one
        # past its newest version; the versions count 0, 1, 2, ... per key.
        if rows != log_rows:
            problems.append(f"broker {i}: index rows {rows} differ from the log's {log_rows}")
        per_key: dict[bytes, list[int]] = {}
        for key, version, _ in log_rows:
            per_key.setdefault(key, []).append(version)
        for key, versions in per_key.items():
            if versions != list(range(len(versions))):
                problems.append(f"broker {i}: {key!r} has versions {versions}")
        if counts != {k: len(v) for k, v in per_key.items()}:
            problems.append(f"broker {i}: index counts {counts}, log {per_key}")
        if reference is None:
            reference = (log_rows, counts)
        elif (log_rows, counts) != reference:
            problems.append(f"broker {i}: differs from broker {brokers[0]}")
    return problems, (reference[1] if reference else {})


def assert_indexes_agree(cluster: Cluster, topic: str, brokers: list[int]) -> dict[int, dict]:
    """Every partition's replicas on `brokers` hold the same log and an index that
    agrees with it, once they have caught up; per partition, the key counts."""
    out = {}
    for p in range(PARTITIONS):
        last: list = [["not read"]]

        def agree(p: int = p, last: list = last):
            problems, counts = replica_problems(cluster, topic, p, brokers)
            last[0] = problems
            return None if problems else (counts,)

        try:
            (out[p],) = wait_until(agree, f"{topic}-{p}'s replicas and indexes agreeing", 30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last[0]}") from None
    return out


def versions_read(bootstrap: str, topic: str, key: bytes) -> list[int]:
    """The key's chronik-version headers as a consumer reads its partition."""
    p = partition_for_key(key, PARTITIONS)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kvc-read",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        consumer.assign([TopicPartition(topic, p, low)])
        out, last = [], low - 1
        while last < high - 1:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is not None:
                    continue
                last = msg.offset()
                if msg.key() == key:
                    out.append(int(dict(msg.headers())[VERSION_HEADER]))
        return out
    finally:
        consumer.close()


def test_followers_index_the_versions_their_leader_gave(cluster: Cluster, topic: str):
    appender = Appender(cluster.bootstrap)
    for round_ in range(4):
        for key in KEYS:
            err, partition, _ = appender.append(topic, key, round_, b"r%d" % round_)
            assert err is None, err
            assert partition == partition_for_key(key, PARTITIONS)
    # A stale expectation is refused by the leader and reaches no replica.
    err, _, _ = appender.append(topic, KEYS[0], 2, b"stale")
    assert err is not None and err.code() == INVALID_RECORD
    # Records without the header still get versions, on every replica.
    err, _, _ = appender.append(topic, KEYS[1], None, b"free")
    assert err is None
    counts = assert_indexes_agree(cluster, topic, cluster.ids)
    merged = {k: c for per in counts.values() for k, c in per.items()}
    assert merged == {k: 5 if k == KEYS[1] else 4 for k in KEYS}
    assert sum(len(v) > 0 for v in counts.values()) >= 2, "the keys should spread"


FORWARDED = {"chronik-forwarded": "1"}


def test_http_api_off_the_leader_forwards_to_it(cluster: Cluster, topic: str):
    for key in KEYS[:3]:
        p = partition_for_key(key, PARTITIONS)
        lead = leader(cluster, topic, p)
        status, probe = http_get(cluster, lead, key_path(topic, key))
        assert status == 200 and probe["partition"] == p and probe["version_count"] >= 4
        _, events = http_get(cluster, lead, key_path(topic, key) + "/events")
        for i in cluster.ids:
            if i == lead:
                continue
            # Answered by the leader, through broker i.
            assert http_get(cluster, i, key_path(topic, key)) == (200, probe)
            assert http_get(cluster, i, key_path(topic, key) + "/events") == (200, events)
            status, body = http_post(cluster, i, key_path(topic, key) + "/events",
                                     {"events": [{"value": "x"}]}, {"If-Match": '"99"'})
            assert (status, body["error"]) == (412, "version_conflict"), body
            assert body["actual"] == probe["version_count"]
            # A request forwarded already is never forwarded again.
            for path in (key_path(topic, key), key_path(topic, key) + "/events"):
                status, body = http_get(cluster, i, path, FORWARDED)
                assert status == 421, (i, path, body)
                assert body["error"] == "not_leader"
                assert body["leader"] == lead and body["partition"] == p
            status, body = http_post(cluster, i, key_path(topic, key) + "/events",
                                     {"events": [{"value": "x"}]},
                                     {"If-Match": '"99"', **FORWARDED})
            assert status == 421 and body["leader"] == lead


def test_conditional_appends_go_on_after_the_leader_is_killed(cluster: Cluster, topic: str):
    key = KEYS[2]
    p = partition_for_key(key, PARTITIONS)
    old = leader(cluster, topic, p)
    epoch = cluster.partition_state(topic, p)["leader_epoch"]
    appender = Appender(cluster.bootstrap)
    err, _, _ = appender.append(topic, key, 4, b"before")
    assert err is None, err

    cluster.kill(old)
    survivors = [i for i in cluster.ids if i != old]
    new = wait_until(lambda: leader(cluster, topic, p) in survivors and leader(cluster, topic, p),
                     f"{topic}-{p} led by a survivor of broker {old}")
    assert cluster.partition_state(topic, p)["leader_epoch"] > epoch

    # The new leader numbers on from its own index, filled from the old leader's headers.
    err, _, offset = appender.append(topic, key, 5, b"after-1")
    assert err is None, err
    err, _, _ = appender.append(topic, key, 5, b"stale")
    assert err is not None and err.code() == INVALID_RECORD and not err.retriable()
    err, _, _ = appender.append(topic, key, 6, b"after-2")
    assert err is None, err
    # Over HTTP on the new leader too; the old leader's address answers nothing now.
    status, body = http_post(cluster, new, key_path(topic, key) + "/events",
                             {"events": [{"value": "after-3"}]}, {"If-Match": '"7"'})
    assert status == 201 and body["first_version"] == 7, body
    status, body = http_post(cluster, new, key_path(topic, key) + "/events",
                             {"events": [{"value": "stale"}]}, {"If-Match": '"7"'})
    assert status == 412 and body["actual"] == 8, body
    status, body = http_get(cluster, new, key_path(topic, key) + "/events")
    assert status == 200
    assert [e["version"] for e in body["events"]] == list(range(8))
    assert [e["value"] for e in body["events"]][4:] == ["before", "after-1", "after-2", "after-3"]

    assert versions_read(",".join(cluster.broker(i).bootstrap for i in survivors),
                         topic, key) == list(range(8))
    assert_indexes_agree(cluster, topic, survivors)

    # The killed broker comes back as a follower, catches up, and its index agrees.
    cluster.start(old)
    counts = assert_indexes_agree(cluster, topic, cluster.ids)
    assert counts[p][key] == 8
    lead = leader(cluster, topic, p)
    other = next(i for i in cluster.ids if i != lead)
    status, body = http_get(cluster, other, key_path(topic, key), FORWARDED)
    assert status == 421 and body["leader"] == lead
    status, body = http_get(cluster, other, key_path(topic, key))
    assert status == 200 and body["version_count"] == 8
    status, body = http_get(cluster, lead, key_path(topic, key))
    assert status == 200 and body["version_count"] == 8


def test_http_api_without_a_leader_answers_503_not_421(cluster: Cluster):
    """A partition whose only replica is down: while its broker is still registered the
    forward finds nobody there (503 leader_unreachable); once it has no leader the API
    says 503 leader_not_available (try again later), not 421 pointing at no broker (-1)
    or at the dead one."""
    name = topic_name("kvc1")
    create_replicated_topic(cluster, name, PARTITIONS, rf=1, **{"key.versioning.enable": "true"})
    key = KEYS[0]
    p = partition_for_key(key, PARTITIONS)
    lead = leader(cluster, name, p)
    other = next(i for i in cluster.ids if i != lead)
    status, body = http_get(cluster, other, key_path(name, key), FORWARDED)
    assert status == 421 and body["leader"] == lead
    assert http_get(cluster, other, key_path(name, key))[0] == 200
    cluster.kill(lead)
    try:
        # Its ZooKeeper session lasts seconds more: still named leader, nobody answers.
        status, body = http_get(cluster, other, key_path(name, key))
        assert (status, body["error"], body["leader"]) == (503, "leader_unreachable", lead), body
        assert f"broker {lead} did not answer" in body["message"]
        wait_until(lambda: lead not in cluster.live_ids(), f"broker {lead}'s session gone")
        status, body = wait_until(
            lambda: (r := http_get(cluster, other, key_path(name, key)))[1]["error"]
            == "leader_not_available" and r,
            "a leaderless partition answered leader_not_available", 20,
        )
        assert status == 503 and "leader" not in body
    finally:
        cluster.start(lead)
    status, body = wait_until(
        lambda: (r := http_get(cluster, lead, key_path(name, key)))[0] == 200 and r,
        "the partition's leader back", 30,
    )
    assert body["version_count"] == 0


def test_a_follower_that_starts_over_takes_the_counts_of_deleted_keys(cluster: Cluster):
    """A follower away while a key's every record was written and deleted (DeleteRecords)
    finds its log ending below its leader's log start: it starts over there, and copies
    the leader's counts of keys whose records all lay below (chronik's KeyCounts request)
    before fetching on. Then, leading, it numbers that key on from where it was, not
    from 0."""
    name = topic_name("kvc2")
    create_replicated_topic(cluster, name, 1, rf=2, **{
        "key.versioning.enable": "true", "min.insync.replicas": "1",
    })
    lead = leader(cluster, name, 0)
    (follower,) = (i for i in cluster.assignment(name)[0] if i != lead)
    appender = Appender(cluster.bootstrap)
    cluster.stop(follower)
    wait_until(lambda: follower not in isr(cluster, name, 0), f"broker {follower} out of the ISR")
    for version in range(3):
        err, _, _ = appender.append(name, b"gone", version, b"g%d" % version)
        assert err is None, err
    err, _, cut = appender.append(name, b"kept", 0, b"k")
    assert err is None and cut == 3, (err, cut)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    point = TopicPartition(name, 0, cut)
    admin.delete_records([point])[point].result(30)

    cluster.start(follower)
    wait_until(lambda: sorted(isr(cluster, name, 0)) == sorted([lead, follower]),
               f"broker {follower} back in the ISR", 60)
    assert "copied 1 key version counts below offset 3" in cluster.log_text(follower)
    end, counts, rows = index_of(cluster.partition_dir(follower, name, 0))
    assert counts == {b"gone": 3, b"kept": 1} and rows == [(b"kept", 0, 3)], (counts, rows)

    cluster.kill(lead)
    try:
        wait_until(lambda: leader(cluster, name, 0) == follower, f"broker {follower} leading")
        err, _, _ = appender.append(name, b"gone", 0, b"again")
        assert err is not None and err.code() == INVALID_RECORD, err
        err, _, offset = appender.append(name, b"gone", 3, b"g3")
        assert err is None and offset == 4, (err, offset)
    finally:
        cluster.start(lead)
    wait_until(lambda: sorted(isr(cluster, name, 0)) == sorted([lead, follower]),
               f"broker {lead} back in the ISR", 60)
