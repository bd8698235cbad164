"""Null in request fields, against a real broker process.

Where Kafka's schema allows null, the request is served (with the error code Kafka
gives when the null leaves nothing to look up). Where it does not, Kafka's parser
refuses the request and closes the connection; so does chronik, with one log line.
Neither case may leave a traceback in the broker's log.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.fetch.v15 import request as fetch_v15
from kio.schema.metadata.v11 import request as metadata_v11
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7
from kio.schema.offset_fetch.v9 import request as offset_fetch_v9

from conftest import BrokerProcess

from .helpers import create_topic, topic_name
from .rawclient import RawClient
from .test_lying_requests import request_frame

INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data: Path = tmp_path_factory.mktemp("nulls") / "data"
    proc = BrokerProcess(data)
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def clean_log(broker: BrokerProcess) -> Iterator[None]:
    before = len(broker.log_text())
    yield
    assert broker.proc is not None and broker.proc.poll() is None
    assert "Traceback" not in broker.log_text()[before:]


def test_fetch_by_the_zero_topic_id_gets_unknown_topic_id(broker, clean_log) -> None:
    request = fetch_v15.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        topics=(
            fetch_v15.FetchTopic(
                topic_id=None,
                partitions=(
                    fetch_v15.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1000),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(request)
    (topic,) = response.responses
    assert topic.topic_id in (None, uuid.UUID(int=0))
    assert int(topic.partitions[0].error_code) == UNKNOWN_TOPIC_ID


def test_metadata_v11_null_topic_name_gets_invalid_request(broker, clean_log) -> None:
    request = metadata_v11.MetadataRequest(
        topics=(metadata_v11.MetadataRequestTopic(topic_id=None, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(request)
    (topic,) = response.topics
    assert int(topic.error_code) == INVALID_REQUEST
    assert topic.name == ""


def test_metadata_v12_topic_without_name_or_id_gets_invalid_request(broker, clean_log) -> None:
    known = topic_name("md")
    create_topic(broker.bootstrap, known)
    unknown_id = uuid.uuid4()
    request = metadata_v12.MetadataRequest(
        topics=(
            metadata_v12.MetadataRequestTopic(topic_id=None, name=None),
            metadata_v12.MetadataRequestTopic(topic_id=unknown_id, name=None),
            metadata_v12.MetadataRequestTopic(topic_id=None, name=known),
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(request)
    codes = [int(t.error_code) for t in response.topics]
    assert codes == [INVALID_REQUEST, UNKNOWN_TOPIC_ID, 0]
    assert response.topics[2].name == known


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_offset_fetch_null_topics_means_every_topic(broker, clean_log) -> None:
    topic, group = topic_name("of"), topic_name("g")
    create_topic(broker.bootstrap, topic)
    _commit(broker.bootstrap, group, topic, 3)
    v9 = offset_fetch_v9.OffsetFetchRequest(
        groups=(offset_fetch_v9.OffsetFetchRequestGroup(group_id=group, topics=None),),
    )
    v7 = offset_fetch_v7.OffsetFetchRequest(group_id=group, topics=None)
    with RawClient(broker.bootstrap) as client:
        (answer,) = client.request(v9).groups
        old = client.request(v7, correlation_id=2)
    assert int(answer.error_code) == 0
    assert [(t.name, t.partitions[0].committed_offset) for t in answer.topics] == [(topic, 3)]
    assert [(t.name, t.partitions[0].committed_offset) for t in old.topics] == [(topic, 3)]


TAIL_V7 = struct.pack(">ib", 5000, 0) + b"\x00"  # timeout, validate_only, no tags
TOPIC_V7 = struct.pack(">ih", 1, 1) + b"\x01\x01\x00"  # partitions, rf, [], [], no tags

# (api key, version, flexible, body, the field the log line must name)
NULLS = {
    "produce-v9-topic-data": (
        0,
        9,
        True,
        b"\x00" + struct.pack(">hi", 1, 5000) + b"\x00\x00",
        "ProduceRequest.topic_data",
    ),
    "create-topics-v7-topics": (19, 7, True, b"\x00" + TAIL_V7, "CreateTopicsRequest.topics"),
    "create-topics-v7-name": (
        19,
        7,
        True,
        b"\x02\x00" + TOPIC_V7 + TAIL_V7,
        "CreatableTopic.name",
    ),
    "create-topics-v4-name": (
        19,
        4,
        False,
        struct.pack(">ihihiiib", 1, -1, 1, 1, 0, 0, 5000, 0),
        "CreatableTopic.name",
    ),
    "offset-fetch-v9-groups": (9, 9, True, b"\x00\x00\x00", "OffsetFetchRequest.groups"),
    "metadata-v0-topics": (3, 0, False, struct.pack(">i", -1), "MetadataRequest.topics"),
}


@pytest.mark.parametrize("case", list(NULLS))
def test_null_where_the_schema_forbids_it_closes_with_one_line(
    broker: BrokerProcess, clean_log: None, case: str
) -> None:
    api_key, version, flexible, body, field = NULLS[case]
    before = len(broker.log_text())
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(request_frame(api_key, version, body, flexible))
        assert client.is_closed()
    logged = broker.log_text()[before:]
    lines = [line for line in logged.splitlines() if "closing connection" in line]
    assert len(lines) == 1, logged
    assert f"non-nullable field {field} was serialized as null" in lines[0], lines[0]
