"""The hand-written Produce response encoder agrees with kio's schema decoders."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_reader

from chronik.protocol import compat, legacy
from chronik.protocol.produce_response import (
    PartitionResult,
    TopicResult,
    encode_produce_response,
)

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

partition = st.tuples(
    st.integers(0, 2**31 - 1),
    st.sampled_from([0, 2, 3, 10, 21, 87, -1]),
    st.integers(-1, 2**62),
    # kio decodes the time through a float of seconds: exact to the millisecond until ~2039
    st.one_of(st.just(-1), st.integers(0, 2**41)),
    st.integers(-1, 2**62),
    st.one_of(st.none(), st.text(max_size=200)),
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.one_of(st.none(), st.text(max_size=50))),
        max_size=3,
    ).map(tuple),
)
topic = st.tuples(
    st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=200),
    st.lists(partition, max_size=4),
)


def _schema(version: int) -> type:
    cls = legacy.response_class(0, version) if version < 3 else load_response_schema(0, version)
    assert cls is not None
    return cls


def _millis(value: datetime.datetime | int | None) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return (value - EPOCH) // datetime.timedelta(milliseconds=1)
    return value


@settings(max_examples=150, deadline=None)
@given(version=st.integers(0, 11), topics=st.lists(topic, max_size=3))
def test_encoding_decodes_with_kio(version: int, topics: list[TopicResult]) -> None:
    body = b"".join(encode_produce_response(version, topics))
    decoded, size = entity_reader(_schema(version))(body, 0)
    assert size == len(body)
    assert len(decoded.responses) == len(topics)
    for got, (name, partitions) in zip(decoded.responses, topics, strict=True):
        assert got.name == name
        assert len(got.partition_responses) == len(partitions)
        for gp, wp in zip(got.partition_responses, partitions, strict=True):
            _check_partition(version, gp, wp)
    if version >= 1:
        assert decoded.throttle_time == datetime.timedelta(0)


def _check_partition(version: int, got: Any, want: PartitionResult) -> None:
    index, error_code, base_offset, append_time, start_offset, message, record_errors = want
    assert got.index == index
    assert int(got.error_code) == error_code
    assert got.base_offset == base_offset
    if version >= 2:
        assert _millis(got.log_append_time) == append_time
    if version >= 5:
        assert got.log_start_offset == start_offset
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message) for e in got.record_errors] == list(
            record_errors
        )
        assert got.error_message == message


@settings(max_examples=100, deadline=None)
@given(version=st.integers(0, 11), topics=st.lists(topic, max_size=3))
def test_same_bytes_as_kio_encoder(version: int, topics: list[TopicResult]) -> None:
    module = compat.response_module(0, version)
    entity = compat.build(
        module.ProduceResponse,
        responses=tuple(
            compat.build(
                module.TopicProduceResponse,
                name=name,
                partition_responses=tuple(
                    compat.build(
                        module.PartitionProduceResponse,
                        index=p[0],
                        error_code=p[1],
                        base_offset=p[2],
                        log_append_time=p[3],
                        log_start_offset=p[4],
                        record_errors=tuple(
                            compat.build(
                                module.BatchIndexAndErrorMessage,
                                batch_index=i,
                                batch_index_error_message=m,
                            )
                            for i, m in (p[6] if version >= 8 else ())
                        ),
                        error_message=p[5],
                    )
                    for p in partitions
                ),
            )
            for name, partitions in topics
        ),
        throttle_time=0,
    )
    assert b"".join(encode_produce_response(version, topics)) == compat.encode(entity)


def test_no_topics_is_an_empty_array_and_throttle() -> None:
    assert b"".join(encode_produce_response(0, [])) == b"\x00\x00\x00\x00"
    assert b"".join(encode_produce_response(7, [])) == b"\x00\x00\x00\x00" * 2
    assert b"".join(encode_produce_response(11, [])) == b"\x01\x00\x00\x00\x00\x00"
