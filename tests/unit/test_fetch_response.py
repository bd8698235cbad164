"""The hand-written Fetch response encoder agrees with kio's schema decoder."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_reader

from chronik.protocol.fetch_response import PartitionResult, TopicResult, encode_fetch_response

partition = st.builds(
    PartitionResult,
    partition=st.integers(0, 1000),
    error_code=st.sampled_from([0, 1, 3, 100]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    records=st.one_of(st.none(), st.binary(max_size=300)),
    aborted=st.one_of(
        st.none(), st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3)
    ),
)
topic = st.builds(
    TopicResult,
    name=st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20),
    topic_id=st.uuids(),
    partitions=st.lists(partition, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(version=st.integers(4, 16), topics=st.lists(topic, max_size=3), session=st.integers(0, 5))
def test_encoding_decodes_with_kio(version: int, topics: list[TopicResult], session: int) -> None:
    body = b"".join(encode_fetch_response(version, topics, error_code=0, session_id=session))
    cls = load_response_schema(1, version)
    decoded, size = entity_reader(cls)(body, 0)
    assert size == len(body)
    assert len(decoded.responses) == len(topics)
    for got, want in zip(decoded.responses, topics, strict=True):
        if version >= 13:
            assert got.topic_id == want.topic_id
        else:
            assert got.topic == want.name
        assert len(got.partitions) == len(want.partitions)
        for gp, wp in zip(got.partitions, want.partitions, strict=True):
            assert gp.partition_index == wp.partition
            assert int(gp.error_code) == wp.error_code
            assert gp.high_watermark == wp.high_watermark
            assert gp.last_stable_offset == wp.last_stable_offset
            if version >= 5:
                assert gp.log_start_offset == wp.log_start_offset
            got_aborted = [(a.producer_id, a.first_offset) for a in gp.aborted_transactions or ()]
            assert got_aborted == list(wp.aborted or ())
            assert (bytes(gp.records) if gp.records is not None else None) == wp.records
    if version >= 7:
        assert decoded.session_id == session


def test_empty_response_v16() -> None:
    body = b"".join(encode_fetch_response(16, [TopicResult("t", uuid.uuid4(), [])]))
    decoded, _ = entity_reader(load_response_schema(1, 16))(body, 0)
    assert decoded.responses[0].partitions == ()
