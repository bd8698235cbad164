"""A follower's hand-coded Fetch v11: the request encodes as kio encodes it from
Kafka's schema; the response walk reads what the broker's encoder (and kio's) writes,
and refuses a body cut short with ValueError."""

from __future__ import annotations

import io
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_payload_module, load_response_schema
from kio.serial import entity_writer
from kio.static.constants import EntityType

from chronik.protocol.compat import build, encode
from chronik.protocol.fetch_response import PartitionResult, TopicResult, encode_fetch_response
from chronik.protocol.replica_fetch import FetchPosition, decode_response, encode_request

names = st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=12)
positions = st.dictionaries(
    st.tuples(names, st.integers(0, 50)),
    st.builds(FetchPosition, st.integers(0, 2**40), st.integers(0, 2**40),
              st.integers(-1, 1000)),
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(
    partitions=positions,
    forgotten=st.lists(st.tuples(names, st.integers(0, 50)), max_size=4),
    session=st.tuples(st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)),
    sizes=st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1)),
)
def test_request_encodes_as_kio_does(
    partitions: dict[tuple[str, int], FetchPosition],
    forgotten: list[tuple[str, int]],
    session: tuple[int, int],
    sizes: tuple[int, int],
) -> None:
    module = load_payload_module(1, 11, EntityType.request)
    by_topic: dict[str, list[object]] = {}
    for (topic, partition), (offset, start, epoch) in partitions.items():
        by_topic.setdefault(topic, []).append(build(
            module.FetchPartition, partition=partition, current_leader_epoch=epoch,
            fetch_offset=offset, log_start_offset=start, partition_max_bytes=sizes[1],
        ))
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    expected = encode(build(
        module.FetchRequest, replica_id=2, max_wait=500, min_bytes=1, max_bytes=sizes[0],
        isolation_level=0, session_id=session[0], session_epoch=session[1],
        topics=tuple(build(module.FetchTopic, topic=t, partitions=tuple(p))
                     for t, p in by_topic.items()),
        forgotten_topics_data=tuple(build(module.ForgottenTopic, topic=t, partitions=tuple(p))
                                    for t, p in gone.items()),
        rack_id="",
    ))
    got = encode_request(2, 500, 1, sizes[0], session[0], session[1], partitions, sizes[1],
                         forgotten)
    assert got == expected


partition = st.builds(
    PartitionResult,
    partition=st.integers(0, 1000),
    error_code=st.sampled_from([0, 1, 6, 74]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    records=st.one_of(st.none(), st.binary(max_size=300)),
    aborted=st.one_of(
        st.none(), st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3)
    ),
)
topic = st.builds(TopicResult, name=names, topic_id=st.uuids(),
                  partitions=st.lists(partition, max_size=4))


@settings(max_examples=80, deadline=None)
@given(topics=st.lists(topic, max_size=3), error=st.sampled_from([0, 70]),
       session=st.integers(0, 2**31 - 1))
def test_response_walk_reads_the_brokers_encoding(
    topics: list[TopicResult], error: int, session: int
) -> None:
    body = b"".join(encode_fetch_response(11, topics, error_code=error, session_id=session))
    response = decode_response(body)
    assert (response.error_code, response.session_id) == (error, session)
    got = [(p.topic, p.partition, p.error_code, p.high_watermark, p.log_start_offset,
            None if p.records is None else bytes(p.records)) for p in response.partitions()]
    assert got == [(t.name, p.partition, p.error_code, p.high_watermark, p.log_start_offset,
                    p.records) for t in topics for p in t.partitions]
    # Any body cut short is refused as such, never read past or crashed on.
    for cut in range(len(body)):
        try:
            list(decode_response(body[:cut]).partitions())
        except ValueError:
            continue
        raise AssertionError(f"a body cut at {cut} of {len(body)} was read as whole")


def test_response_walk_reads_kios_encoding() -> None:
    cls = load_response_schema(1, 11)
    module = load_payload_module(1, 11, EntityType.response)
    entity = build(
        cls, throttle_time=0, error_code=0, session_id=7,
        responses=(build(module.FetchableTopicResponse, topic="t", partitions=(
            build(module.PartitionData, partition_index=3, error_code=0, high_watermark=10,
                  last_stable_offset=10, log_start_offset=2,
                  aborted_transactions=(build(module.AbortedTransaction, producer_id=5,
                                              first_offset=1),),
                  preferred_read_replica=-1, records=b"abc"),
            build(module.PartitionData, partition_index=4, error_code=6, high_watermark=-1,
                  last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                  preferred_read_replica=-1, records=None),
        )),),
    )
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    parts = list(decode_response(out.getvalue()).partitions())
    assert [(p.partition, p.error_code, p.high_watermark, p.log_start_offset) for p in parts] \
        == [(3, 0, 10, 2), (4, 6, -1, -1)]
    assert parts[0].records is not None and bytes(parts[0].records) == b"abc"
    assert parts[1].records is None


def test_the_spark_reader_reads_the_same_codec_with_its_aborted_transactions() -> None:
    """chronik.spark.fetch_client reads through this codec: a read_committed answer's
    last stable offset and aborted transactions come through, a partition with no
    records gives an empty view, and an error or a cut answer is the reader's
    ProtocolError."""
    from chronik.spark.fetch_client import ProtocolError, decode_fetch, encode_fetch

    parts = [
        PartitionResult(0, 0, 50, 40, 5, b"\x01\x02", [(7, 30), (9, 35)]),
        PartitionResult(1, 0, 8, 8, 0, None, None),
    ]
    body = b"".join(encode_fetch_response(11, [TopicResult("t", uuid.uuid4(), parts)]))
    buf = memoryview(b"\x00\x00\x00\x07" + body)
    got = decode_fetch(buf, b"t", 0)
    assert (got.high_watermark, got.last_stable_offset, got.log_start_offset) == (50, 40, 5)
    assert got.aborted == [(7, 30), (9, 35)] and bytes(got.records) == b"\x01\x02"
    empty = decode_fetch(buf, b"t", 1)
    assert empty.aborted is None and bytes(empty.records) == b""
    with pytest.raises(ProtocolError):
        decode_fetch(buf[: len(buf) - 1], b"t", 1)
    with pytest.raises(ProtocolError):
        decode_fetch(buf, b"t", 2)
    request = encode_fetch(1, b"c", b"t", 0, 12, 500, 1 << 20, isolation_level=1)
    assert request[4 + 10 + 1 + 16] == 1  # size, header, client id "c", 4 int32s: isolation
