"""Mistakes get one clear line on stderr and a non-zero exit, never a hang or a trace."""

from __future__ import annotations

import socket
import time

import pytest

from .cli_support import chronik, ok, unique


def closed_port_bootstrap() -> str:
    """An address where nothing listens (the port was just free)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def assert_one_error(result, expected: str) -> None:
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.error_lines == [f"chronik: error: {expected}"]


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["topics", "create", "x"],
        ["produce", "x"],
        ["consume", "x"],
        ["groups", "list"],
        ["offsets", "x"],
        ["bench", "produce", "--num-records", "10"],
    ],
)
def test_broker_down_fails_fast_with_one_line(args: list[str]) -> None:
    bootstrap = closed_port_bootstrap()
    started = time.monotonic()
    result = chronik(*args, "--connect-timeout", "1", bootstrap=bootstrap, input="x\n")
    assert time.monotonic() - started < 30
    assert_one_error(result, f"cannot reach a broker at {bootstrap} (no answer within 1s)")


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "nope"],
        ["produce", "nope"],
        ["topics", "describe", "nope"],
        ["topics", "delete", "nope"],
        ["topics", "alter", "nope", "--partitions", "2"],
        ["offsets", "nope"],
        ["bench", "consume", "--topic", "nope"],
        ["groups", "reset-offsets", "g", "--topic", "nope", "--to-earliest"],
    ],
)
def test_unknown_topic(broker, args: list[str]) -> None:
    result = chronik(*args, bootstrap=broker.bootstrap, input="x\n")
    assert_one_error(result, "topic 'nope' does not exist")


def test_bad_offsets_and_partitions(broker) -> None:
    b = broker.bootstrap
    topic = unique("bad")
    ok("topics", "create", topic, "--partitions", "2", bootstrap=b)
    ok("produce", topic, "--partition", "0", bootstrap=b, input="a\nb\n")

    assert_one_error(
        chronik("consume", topic, "--partition", "0", "--offset", "ten", bootstrap=b),
        "bad offset 'ten': expected a number, 'earliest' or 'latest'",
    )
    assert_one_error(
        chronik("consume", topic, "--partition", "0", "--offset", "7", bootstrap=b),
        f"offset 7 is out of range for partition 0 of '{topic}' (earliest 0, latest 2)",
    )
    assert_one_error(
        chronik("consume", topic, "--partition", "0", "--offset", "-3", bootstrap=b),
        "bad offset -3: offsets start at 0",
    )
    assert_one_error(
        chronik("consume", topic, "--offset", "1", bootstrap=b), "--offset needs --partition"
    )
    assert_one_error(
        chronik("consume", topic, "--partition", "5", bootstrap=b),
        f"topic '{topic}' has no partition 5 (partitions 0..1)",
    )
    assert_one_error(
        chronik("produce", topic, "--partition", "2", bootstrap=b, input="x\n"),
        f"topic '{topic}' has no partition 2 (partitions 0..1)",
    )


def test_line_without_key_separator_stops_the_producer(broker) -> None:
    topic = unique("sep")
    ok("topics", "create", topic, bootstrap=broker.bootstrap)
    result = chronik(
        "produce",
        topic,
        "--key-separator",
        ":",
        bootstrap=broker.bootstrap,
        input="k:v\nno separator here\nk2:v2\n",
    )
    assert result.returncode != 0
    assert result.error_lines == [
        "Produced a total of 1 records",
        "chronik: error: line 2 has no key separator ':'",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "create"], "the following arguments are required: NAME"),
        (
            ["topics", "create", "t", "--partitions", "0"],
            "argument --partitions: must be greater than 0, got 0",
        ),
        (
            ["consume", "t", "--max-messages", "many"],
            "argument --max-messages: not an integer: 'many'",
        ),
        (["produce", "t", "--acks", "2"], "argument --acks: invalid choice: '2'"),
        (["groups", "reset-offsets", "g", "--topic", "t"], "one of the arguments"),
        (
            ["topics", "create", "t", "--config", "novalue"],
            "argument --config: expected key=value, got 'novalue'",
        ),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
        (
            ["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"],
            "bad time 'soon'",
        ),
    ],
)
def test_bad_arguments_one_line(broker, args: list[str], message: str) -> None:
    if args[-1] == "soon":
        ok("topics", "create", "t", "--if-not-exists", bootstrap=broker.bootstrap)
    result = chronik(*args, bootstrap=broker.bootstrap)
    assert result.returncode != 0
    assert result.stdout == ""
    assert len(result.error_lines) == 1, result.stderr
    assert result.error_lines[0].startswith("chronik: error: ")
    assert message in result.error_lines[0]
