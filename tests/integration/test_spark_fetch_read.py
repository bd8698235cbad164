"""The Spark source's Fetch reader gives the same rows as its librdkafka reader, for every codec,
with nulls, headers, LogAppendTime, compacted gaps, and ranges that start and end inside batches."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("numba")
pytest.importorskip("pyspark")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from chronik.spark import arrow_read, fetch_read  # noqa: E402
from chronik.spark.arrow_read import DataLossError  # noqa: E402
from chronik.spark.options import parse_read_options  # noqa: E402


def _conf(bootstrap: str) -> dict[str, str]:
    opts = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "x"}, False)
    return opts.consumer_config()


def _topic(bootstrap: str, config: dict[str, str] | None = None) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config=config or {})]).values():
        f.result(30)
    return name


def _produce(bootstrap: str, topic: str, n: int, compression: str = "none", **extra) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 97,
                         "compression.type": compression, **extra})
    sent = []
    for i in range(n):
        key = None if i % 7 == 0 else f"k{i % 13}".encode()
        value = None if i % 11 == 0 else (b"v%d-" % i) * (i % 5)
        headers = [("h", b"%d" % i), ("nul", None)] if i % 3 == 0 else None
        producer.produce(
            topic, key=key, value=value, headers=headers, timestamp=1_700_000_000_000 + i
        )
        sent.append((key, value))
    assert producer.flush(30) == 0
    return sent


def _no_fallback(*_args, **_kwargs):
    raise AssertionError("chronik serves everything the Fetch reader needs")


def _rows(batches) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def _both(bootstrap: str, topic: str, start: int, end: int, headers: bool = True):
    conf = _conf(bootstrap)
    fast = _rows(fetch_read.read_range(
        conf, topic, 0, start, end, include_headers=headers, fail_on_data_loss=True,
        poll_timeout_s=20, fallback=_no_fallback,
    ))
    slow = _rows(arrow_read.read_range(conf, topic, 0, start, end, include_headers=headers,
                                       poll_timeout_s=20))
    return fast, slow


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_fetch_reader_matches_librdkafka(broker, codec):
    topic = _topic(broker.bootstrap)
    sent = _produce(broker.bootstrap, topic, 1000, codec)
    fast, slow = _both(broker.bootstrap, topic, 0, 1000)
    assert fast == slow
    assert [(r["key"], r["value"]) for r in fast] == sent
    assert [r["offset"] for r in fast] == list(range(1000))
    with_headers = [r for r in fast if r["headers"]]
    assert with_headers and with_headers[0]["headers"] == [
        {"key": "h", "value": b"0"}, {"key": "nul", "value": None}
    ]


def test_ranges_inside_batches_and_without_headers(broker):
    topic = _topic(broker.bootstrap)
    _produce(broker.bootstrap, topic, 600, "lz4")
    for start, end in [(0, 1), (13, 14), (50, 451), (599, 600), (1, 599)]:
        fast, slow = _both(broker.bootstrap, topic, start, end, headers=False)
        assert fast == slow
        assert [r["offset"] for r in fast] == list(range(start, end))


def test_log_append_time(broker):
    topic = _topic(broker.bootstrap, {"message.timestamp.type": "LogAppendTime"})
    _produce(broker.bootstrap, topic, 50)
    fast, slow = _both(broker.bootstrap, topic, 0, 50)
    assert fast == slow
    assert {r["timestampType"] for r in fast} == {1}


def _fast(bootstrap: str, topic: str, start: int, end: int, fail_on_data_loss: bool) -> list:
    return [r["offset"] for r in _rows(fetch_read.read_range(
        _conf(bootstrap), topic, 0, start, end, include_headers=False,
        fail_on_data_loss=fail_on_data_loss, poll_timeout_s=10, fallback=_no_fallback,
    ))]


def test_truncated_range_is_data_loss_or_end(broker):
    topic = _topic(broker.bootstrap)
    _produce(broker.bootstrap, topic, 10)
    with pytest.raises(DataLossError):
        _fast(broker.bootstrap, topic, 5, 20, fail_on_data_loss=True)
    assert _fast(broker.bootstrap, topic, 5, 20, fail_on_data_loss=False) == list(range(5, 10))


def test_deleted_start_is_data_loss_or_skipped(broker):
    from confluent_kafka import TopicPartition

    topic = _topic(broker.bootstrap)
    _produce(broker.bootstrap, topic, 30)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        f.result(30)
    with pytest.raises(DataLossError):
        _fast(broker.bootstrap, topic, 0, 30, fail_on_data_loss=True)
    assert _fast(broker.bootstrap, topic, 0, 30, fail_on_data_loss=False) == list(range(12, 30))


def test_old_message_formats_switch_to_librdkafka(broker, monkeypatch):
    """chronik stores v2 batches only, so a v1 answer is faked by relabelling the magic."""
    calls = []

    def fallback(conf, topic, partition, start, end, **kwargs):
        calls.append(start)
        yield from arrow_read.read_range(conf, topic, partition, start, end, **kwargs)

    topic = _topic(broker.bootstrap)
    _produce(broker.bootstrap, topic, 20)
    original = fetch_read.record_decode.scan_batches

    def as_v1(buf, start, end):
        starts, fields, bad = original(buf, start, end)
        fields[:, 2] = 1
        return starts, fields, bad

    monkeypatch.setattr(fetch_read.record_decode, "scan_batches", as_v1)
    rows = _rows(fetch_read.read_range(_conf(broker.bootstrap), topic, 0, 3, 20,
                                       include_headers=False, fail_on_data_loss=True,
                                       poll_timeout_s=10, fallback=fallback))
    assert calls == [3]
    assert [r["offset"] for r in rows] == list(range(3, 20))


def test_what_the_fetch_reader_serves_itself():
    assert fetch_read.usable({"bootstrap.servers": "h:1"})
    assert fetch_read.usable({"isolation.level": "read_committed"})
    # TLS and SASL PLAIN/SCRAM too (test_spark_fetch_security.py); not GSSAPI,
    # OAUTHBEARER or a PKCS12 key store, which librdkafka reads.
    assert fetch_read.usable({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"})
    assert not fetch_read.usable({"security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "OAUTHBEARER"})
    assert not fetch_read.usable({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"})


def _transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 0, "compression.type": "lz4"})
    producer.init_transactions(20)
    return producer


def test_read_committed_skips_aborted_transactions_and_stops_at_the_lso(broker):
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    bootstrap = broker.bootstrap
    topic = _topic(bootstrap)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    keeper = _transactional(bootstrap, f"keep-{topic}")
    dropper = _transactional(bootstrap, f"drop-{topic}")
    keeper.begin_transaction()
    dropper.begin_transaction()
    # Committed, aborted and plain batches interleaved on one partition.
    for i in range(30):
        (keeper if i % 3 == 0 else dropper if i % 3 == 1 else plain).produce(
            topic, value=b"%s-%d" % ((b"keep", b"drop", b"plain")[i % 3], i)
        )
        for p in (keeper, dropper, plain):
            p.flush(10)
    dropper.abort_transaction(20)
    keeper.commit_transaction(20)
    # A transaction left open: read_committed ends before it, at the last stable offset.
    opener = _transactional(bootstrap, f"open-{topic}")
    opener.begin_transaction()
    opener.produce(topic, value=b"open")
    opener.flush(10)
    plain.produce(topic, value=b"after-open")
    plain.flush(10)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    (lso,) = [f.result(10).offset for f in admin.list_offsets(
        {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED).values()]
    (hw,) = [f.result(10).offset for f in admin.list_offsets({tp: OffsetSpec.latest()}).values()]
    assert lso < hw

    committed_conf = {**_conf(bootstrap), "isolation.level": "read_committed"}
    fast = _rows(fetch_read.read_range(
        committed_conf, topic, 0, 0, lso, include_headers=False, fail_on_data_loss=True,
        poll_timeout_s=20, fallback=_no_fallback,
    ))
    slow = _rows(arrow_read.read_range(committed_conf, topic, 0, 0, lso, include_headers=False,
                                       poll_timeout_s=20))
    values = [r["value"] for r in fast]
    assert values == [r["value"] for r in slow]
    assert values == [b"%s-%d" % ((b"keep", b"drop", b"plain")[i % 3], i)
                      for i in range(30) if i % 3 != 1]
    everything = [r["value"] for r in _rows(fetch_read.read_range(
        _conf(bootstrap), topic, 0, 0, hw, include_headers=False, fail_on_data_loss=True,
        poll_timeout_s=20, fallback=_no_fallback,
    ))]
    assert sum(v.startswith(b"drop") for v in everything) == 10
    assert everything[-2:] == [b"open", b"after-open"]
    opener.abort_transaction(20)
