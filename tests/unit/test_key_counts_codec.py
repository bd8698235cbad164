"""KeyCounts (chronik.protocol.key_counts), chronik's own inter-broker request: its bodies
round-trip, and any bytes a peer sends are refused as MalformedRequest (the connection
closes with a log line), never another exception."""
from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.protocol import key_counts
from chronik.protocol.framing import MalformedRequest
from chronik.protocol.key_counts import (
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

requests = st.builds(
    Request,
    st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 249),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.one_of(st.none(), st.binary(max_size=64)),
    st.integers(-(2**31), 2**31 - 1),
)


@given(requests)
def test_requests_round_trip(request):
    got = decode_request(encode_request(request))
    for field in Request.__slots__:
        assert getattr(got, field) == getattr(request, field)


@given(st.integers(0, 100), st.lists(st.tuples(st.binary(max_size=30), st.integers(0, 2**62))),
       st.booleans())
def test_responses_round_trip(code, counts, more):
    assert decode_response(b"".join(encode_response(code, counts, more))) == (code, counts, more)


@settings(max_examples=500)
@given(st.one_of(st.binary(max_size=80), requests.map(encode_request)), st.data())
def test_any_bytes_are_a_request_or_malformed(body, data):
    if body and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([data.draw(st.integers(0, 255))]) + body[at + 1 :]
    with contextlib.suppress(MalformedRequest):
        decode_request(body)


@given(st.binary(max_size=80))
def test_any_bytes_are_a_response_or_value_error(body):
    with contextlib.suppress(ValueError):
        decode_response(body)


def test_it_is_not_advertised_to_kafka_clients():
    from chronik.broker.apis.api_versions import _ranges

    assert key_counts.API_KEY not in {key for key, _, _ in _ranges()}
