"""Requests whose lengths lie, sent raw to a real broker process.

Before the decoder was guarded, each of these frames made kio reserve room for
billions of array items and abort the broker (SIGABRT, "memory allocation of ...
bytes failed"). The broker runs with a 4 GiB address space, as on a small machine,
so a legacy int32 count (2^31 items, 16 GiB) aborts it too.
"""

from __future__ import annotations

import resource
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronik.protocol.framing import write_uvarint
from conftest import BrokerProcess

from .helpers import (
    assert_round_trip,
    confluent_produce,
    confluent_read,
    create_topic,
    sample_records,
    topic_name,
)
from .rawclient import RawClient

HUGE = write_uvarint(0x7FFFFFFF0)  # a compact length of about 2^35, in 5 bytes
HUGE_I32 = struct.pack(">i", 0x7FFFFFFF)
ADDRESS_SPACE = 4 << 30


def _small_machine() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def request_frame(api_key: int, version: int, body: bytes, flexible: bool) -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 3) + b"lie"
    if flexible:
        header += b"\x00"  # no tagged fields in the header
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


FETCH_V15_HEAD = struct.pack(">iiibii", 500, 1, 1 << 20, 0, 0, -1)
FETCH_V4_HEAD = struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)

# (api key, version, flexible, body, the array the log line must name)
FRAMES = {
    "metadata-v12": (3, 12, True, HUGE, "MetadataRequest.topics"),
    "fetch-v15-partitions": (
        1,
        15,
        True,
        FETCH_V15_HEAD + write_uvarint(2) + bytes(16) + HUGE,
        "FetchTopic.partitions",
    ),
    "describe-groups-v5": (15, 5, True, HUGE, "DescribeGroupsRequest.groups"),
    "delete-groups-v2": (42, 2, True, HUGE, "DeleteGroupsRequest.groups_names"),
    "offset-fetch-v9": (9, 9, True, HUGE, "OffsetFetchRequest.groups"),
    "list-offsets-v8": (2, 8, True, struct.pack(">ib", -1, 0) + HUGE, "ListOffsetsRequest.topics"),
    "metadata-v4-int32": (3, 4, False, HUGE_I32, "MetadataRequest.topics"),
    "produce-v2-int32": (0, 2, False, struct.pack(">hi", 1, 1000) + HUGE_I32, "topic_data"),
    "fetch-v4-int32-partitions": (
        1,
        4,
        False,
        FETCH_V4_HEAD + struct.pack(">ih", 1, 1) + b"t" + HUGE_I32,
        "FetchTopic.partitions",
    ),
    "describe-groups-v0-int32": (15, 0, False, HUGE_I32, "DescribeGroupsRequest.groups"),
}


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("lying") / "data"
    proc = BrokerProcess(data, preexec_fn=_small_machine)
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.mark.parametrize("case", list(FRAMES))
def test_lying_array_length_closes_connection_and_broker_serves_on(
    small_broker: BrokerProcess, case: str
) -> None:
    api_key, version, flexible, body, field = FRAMES[case]
    before = len(small_broker.log_text())
    with RawClient(small_broker.bootstrap) as client:
        client.send_bytes(request_frame(api_key, version, body, flexible))
        assert client.is_closed()

    assert small_broker.proc is not None
    assert small_broker.proc.poll() is None, small_broker.log_text()[before:]
    topic = topic_name(case)
    create_topic(small_broker.bootstrap, topic)
    sent = sample_records(5)
    confluent_produce(small_broker.bootstrap, topic, sent)
    got = confluent_read(small_broker.bootstrap, topic, 1, len(sent))
    assert_round_trip(sent, got, partitions=1)

    logged = small_broker.log_text()[before:]
    assert "Traceback" not in logged
    lines = [line for line in logged.splitlines() if "closing connection" in line]
    assert len(lines) == 1, logged
    assert field in lines[0] and "cannot fit" in lines[0], lines[0]
