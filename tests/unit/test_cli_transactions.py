"""The CLI's own reader of DescribeTransactionsResponse v0, against responses encoded
the way the broker's handler builds them (an id with no transaction open has the start
time -1, which kio's decoder refuses)."""

from __future__ import annotations

import datetime
import struct

import pytest

from chronik.cli.transactions import read_describe_transactions
from chronik.protocol.compat import build, encode, response_module

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
_MOD = response_module(65, 0)


def _state(code: int, txn_id: str, start_ms: int, topics=()) -> object:
    return build(
        _MOD.TransactionState,
        error_code=code,
        transactional_id=txn_id,
        transaction_state="Ongoing" if code == 0 else "",
        transaction_timeout=datetime.timedelta(milliseconds=60_000 if code == 0 else 0),
        transaction_start_time=_EPOCH + datetime.timedelta(milliseconds=start_ms),
        producer_id=4000 if code == 0 else -1,
        producer_epoch=3 if code == 0 else -1,
        topics=tuple(build(_MOD.TopicData, topic=t, partitions=tuple(ps)) for t, ps in topics),
    )


def _body(*states: object) -> bytes:
    return encode(
        build(_MOD.DescribeTransactionsResponse, throttle_time=0, transaction_states=states)
    )


def test_reads_an_open_transaction_and_an_unknown_id():
    body = _body(
        _state(0, "billing-1", 1_764_000_000_123, [("orders", [0, 2]), ("audit", [1])]),
        _state(105, "no-such-id", -1),
    )
    mine, missing = read_describe_transactions(body)
    assert (mine.error_code, mine.transactional_id, mine.transaction_state) == (
        0,
        "billing-1",
        "Ongoing",
    )
    assert (mine.timeout_ms, mine.start_ms, mine.producer_id, mine.producer_epoch) == (
        60_000,
        1_764_000_000_123,
        4000,
        3,
    )
    assert mine.topics == [("orders", [0, 2]), ("audit", [1])]
    assert (missing.error_code, missing.transactional_id, missing.start_ms) == (
        105,
        "no-such-id",
        -1,
    )
    assert (missing.producer_id, missing.producer_epoch, missing.topics) == (-1, -1, [])


def test_a_truncated_answer_raises_what_the_cli_turns_into_an_error():
    body = _body(_state(0, "billing-1", 5, [("orders", [0])]))
    with pytest.raises((struct.error, IndexError)):
        read_describe_transactions(body[: len(body) - 6])
