# Message schemas of the protocol versions Kafka 4.0 dropped (KIP-896, and with ZooKeeper
# mode its ControlledShutdown) that kio therefore does not generate, written out from
# Kafka 3.x's message JSON files (clients/src/main/resources/common/message/*.json).
# All are non-flexible but ControlledShutdown v3:
#
# Produce v0-2 request:   acks int16, timeout_ms int32,
#                         topic_data [name string, partition_data [index int32, records bytes]]
#          response v0:   responses [name string, partition_responses
#                                    [index int32, error_code int16, base_offset int64
#                                     (v2+ log_append_time_ms int64)]]
#                         (v1+ throttle_time_ms int32)
# ListOffsets v0 request: replica_id int32, topics [name string, partitions
#                         [partition_index int32, timestamp int64, max_num_offsets int32]]
#          response:      topics [name string, partitions [partition_index int32,
#                         error_code int16, old_style_offsets [int64]]]
# CreateTopics v0-1 request: topics [name string, num_partitions int32,
#                         replication_factor int16, assignments [partition_index int32,
#                         broker_ids [int32]], configs [name string, value nullable string]],
#                         timeout_ms int32 (v1+ validate_only bool)
#          response:      (v2 only: throttle) topics [name string, error_code int16
#                         (v1+ error_message nullable string)]
# DescribeConfigs v0 request: resources [resource_type int8, resource_name string,
#                         configuration_keys nullable [string]]
#          response:      throttle_time_ms int32, results [error_code int16,
#                         error_message nullable string, resource_type int8,
#                         resource_name string, configs [name string, value nullable string,
#                         read_only bool, is_default bool, is_sensitive bool]]
# OffsetForLeaderEpoch v0-1 request: topics [topic string, partitions [partition int32,
#                         leader_epoch int32]]
#          response:      topics [topic string, partitions [error_code int16,
#                         partition int32, (v1+ leader_epoch int32) end_offset int64]]
#
# ControlledShutdown v0-3 (Kafka 4.0 dropped the API with ZooKeeper mode), v3 flexible:
#          request:       broker_id int32 (v2+ broker_epoch int64, default -1);
#                         v0 comes with request header v0, without a client id
#          response:      error_code int16, remaining_partitions [topic_name string,
#                         partition_index int32]
#
# kio decodes and encodes any dataclass laid out the way its generated ones are,
# so these plug into the same codec.
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

REQUEST, RESPONSE = "request", "response"

_TYPES: dict[str, Any] = {
    "int8": i8,
    "int16": i16,
    "int32": i32,
    "int64": i64,
    "bool": bool,
    "string": str,
    "records": bytes,
    "error_code": ErrorCode,
    "timedelta_i32": i32Timedelta,
}


def _entity(
    name: str,
    api_key: int,
    version: int,
    kind: EntityType,
    spec: list[tuple[Any, ...]],
    flexible: bool = False,
) -> type:
    """A kio-style entity: spec rows are (field, kafka type | nested class, options)."""
    fields = []
    for row in spec:
        field_name, kafka_type = row[0], row[1]
        opts = row[2] if len(row) > 2 else ""
        array = "[]" in opts
        nullable = "?" in opts
        if isinstance(kafka_type, type):
            annotation: Any = tuple[kafka_type, ...] if array else kafka_type
            metadata: dict[str, str] = {}
        else:
            base = _TYPES[kafka_type]
            annotation = tuple[base, ...] if array else base
            metadata = {"kafka_type": kafka_type}
        if nullable:
            annotation = annotation | None
        fields.append((field_name, annotation, dataclasses.field(metadata=metadata)))
    cls = dataclasses.make_dataclass(name, fields, frozen=True, slots=True, kw_only=True)
    cls.__type__ = kind  # type: ignore[attr-defined]
    cls.__version__ = i16(version)  # type: ignore[attr-defined]
    cls.__flexible__ = flexible  # type: ignore[attr-defined]
    cls.__api_key__ = i16(api_key)  # type: ignore[attr-defined]
    for attr in ("__type__", "__version__", "__flexible__", "__api_key__"):
        cls.__annotations__[attr] = ClassVar
    return cls


NESTED = EntityType.nested

# api key, version -> request class / namespace of response classes
REQUESTS: dict[tuple[int, int], type] = {}
RESPONSES: dict[tuple[int, int], SimpleNamespace] = {}


def _produce(version: int) -> None:
    k = 0
    pdata = _entity(
        "PartitionProduceData",
        k,
        version,
        NESTED,
        [("index", "int32"), ("records", "records", "?")],
    )
    tdata = _entity(
        "TopicProduceData",
        k,
        version,
        NESTED,
        [("name", "string"), ("partition_data", pdata, "[]")],
    )
    REQUESTS[k, version] = _entity(
        "ProduceRequest",
        k,
        version,
        EntityType.request,
        [("acks", "int16"), ("timeout", "timedelta_i32"), ("topic_data", tdata, "[]")],
    )
    part_spec: list[tuple[Any, ...]] = [
        ("index", "int32"),
        ("error_code", "error_code"),
        ("base_offset", "int64"),
    ]
    if version >= 2:
        part_spec.append(("log_append_time", "int64"))
    part = _entity("PartitionProduceResponse", k, version, NESTED, part_spec)
    topic = _entity(
        "TopicProduceResponse",
        k,
        version,
        NESTED,
        [("name", "string"), ("partition_responses", part, "[]")],
    )
    top_spec: list[tuple[Any, ...]] = [("responses", topic, "[]")]
    if version >= 1:
        top_spec.append(("throttle_time", "timedelta_i32"))
    top = _entity("ProduceResponse", k, version, EntityType.response, top_spec)
    RESPONSES[k, version] = SimpleNamespace(
        PartitionProduceResponse=part, TopicProduceResponse=topic, ProduceResponse=top
    )


def _list_offsets_v0() -> None:
    k, v = 2, 0
    part = _entity(
        "ListOffsetsPartition",
        k,
        v,
        NESTED,
        [("partition_index", "int32"), ("timestamp", "int64"), ("max_num_offsets", "int32")],
    )
    topic = _entity(
        "ListOffsetsTopic", k, v, NESTED, [("name", "string"), ("partitions", part, "[]")]
    )
    REQUESTS[k, v] = _entity(
        "ListOffsetsRequest",
        k,
        v,
        EntityType.request,
        [("replica_id", "int32"), ("topics", topic, "[]")],
    )
    rpart = _entity(
        "ListOffsetsPartitionResponse",
        k,
        v,
        NESTED,
        [
            ("partition_index", "int32"),
            ("error_code", "error_code"),
            ("old_style_offsets", "int64", "[]"),
        ],
    )
    rtopic = _entity(
        "ListOffsetsTopicResponse", k, v, NESTED, [("name", "string"), ("partitions", rpart, "[]")]
    )
    top = _entity("ListOffsetsResponse", k, v, EntityType.response, [("topics", rtopic, "[]")])
    RESPONSES[k, v] = SimpleNamespace(
        ListOffsetsPartitionResponse=rpart, ListOffsetsTopicResponse=rtopic, ListOffsetsResponse=top
    )


def _create_topics(version: int) -> None:
    k = 19
    assignment = _entity(
        "CreatableReplicaAssignment",
        k,
        version,
        NESTED,
        [("partition_index", "int32"), ("broker_ids", "int32", "[]")],
    )
    config = _entity(
        "CreatableTopicConfig", k, version, NESTED, [("name", "string"), ("value", "string", "?")]
    )
    topic = _entity(
        "CreatableTopic",
        k,
        version,
        NESTED,
        [
            ("name", "string"),
            ("num_partitions", "int32"),
            ("replication_factor", "int16"),
            ("assignments", assignment, "[]"),
            ("configs", config, "[]"),
        ],
    )
    spec: list[tuple[Any, ...]] = [("topics", topic, "[]"), ("timeout", "timedelta_i32")]
    if version >= 1:
        spec.append(("validate_only", "bool"))
    REQUESTS[k, version] = _entity("CreateTopicsRequest", k, version, EntityType.request, spec)
    result_spec: list[tuple[Any, ...]] = [("name", "string"), ("error_code", "error_code")]
    if version >= 1:
        result_spec.append(("error_message", "string", "?"))
    result = _entity("CreatableTopicResult", k, version, NESTED, result_spec)
    top = _entity(
        "CreateTopicsResponse", k, version, EntityType.response, [("topics", result, "[]")]
    )
    RESPONSES[k, version] = SimpleNamespace(CreatableTopicResult=result, CreateTopicsResponse=top)


def _describe_configs_v0() -> None:
    k, v = 32, 0
    resource = _entity(
        "DescribeConfigsResource",
        k,
        v,
        NESTED,
        [
            ("resource_type", "int8"),
            ("resource_name", "string"),
            ("configuration_keys", "string", "[]?"),
        ],
    )
    REQUESTS[k, v] = _entity(
        "DescribeConfigsRequest", k, v, EntityType.request, [("resources", resource, "[]")]
    )
    entry = _entity(
        "DescribeConfigsResourceResult",
        k,
        v,
        NESTED,
        [
            ("name", "string"),
            ("value", "string", "?"),
            ("read_only", "bool"),
            ("is_default", "bool"),
            ("is_sensitive", "bool"),
        ],
    )
    result = _entity(
        "DescribeConfigsResult",
        k,
        v,
        NESTED,
        [
            ("error_code", "error_code"),
            ("error_message", "string", "?"),
            ("resource_type", "int8"),
            ("resource_name", "string"),
            ("configs", entry, "[]"),
        ],
    )
    top = _entity(
        "DescribeConfigsResponse",
        k,
        v,
        EntityType.response,
        [("throttle_time", "timedelta_i32"), ("results", result, "[]")],
    )
    RESPONSES[k, v] = SimpleNamespace(
        DescribeConfigsResourceResult=entry,
        DescribeConfigsResult=result,
        DescribeConfigsResponse=top,
    )


def _offset_for_leader_epoch(version: int) -> None:
    k = 23
    part = _entity(
        "OffsetForLeaderPartition",
        k,
        version,
        NESTED,
        [("partition", "int32"), ("leader_epoch", "int32")],
    )
    topic = _entity(
        "OffsetForLeaderTopic",
        k,
        version,
        NESTED,
        [("topic", "string"), ("partitions", part, "[]")],
    )
    REQUESTS[k, version] = _entity(
        "OffsetForLeaderEpochRequest", k, version, EntityType.request, [("topics", topic, "[]")]
    )
    spec: list[tuple[Any, ...]] = [("error_code", "error_code"), ("partition", "int32")]
    if version >= 1:
        spec.append(("leader_epoch", "int32"))
    spec.append(("end_offset", "int64"))
    result = _entity("EpochEndOffset", k, version, NESTED, spec)
    rtopic = _entity(
        "OffsetForLeaderTopicResult",
        k,
        version,
        NESTED,
        [("topic", "string"), ("partitions", result, "[]")],
    )
    top = _entity(
        "OffsetForLeaderEpochResponse", k, version, EntityType.response, [("topics", rtopic, "[]")]
    )
    RESPONSES[k, version] = SimpleNamespace(
        EpochEndOffset=result, OffsetForLeaderTopicResult=rtopic, OffsetForLeaderEpochResponse=top
    )


def _controlled_shutdown(version: int) -> None:
    k = 7
    flexible = version >= 3
    spec: list[tuple[Any, ...]] = [("broker_id", "int32")]
    if version >= 2:
        spec.append(("broker_epoch", "int64"))
    REQUESTS[k, version] = _entity(
        "ControlledShutdownRequest", k, version, EntityType.request, spec, flexible
    )
    remaining = _entity(
        "RemainingPartition",
        k,
        version,
        NESTED,
        [("topic_name", "string"), ("partition_index", "int32")],
        flexible,
    )
    top = _entity(
        "ControlledShutdownResponse",
        k,
        version,
        EntityType.response,
        [("error_code", "error_code"), ("remaining_partitions", remaining, "[]")],
        flexible,
    )
    RESPONSES[k, version] = SimpleNamespace(
        RemainingPartition=remaining, ControlledShutdownResponse=top
    )


def response_class(api_key: int, version: int) -> type | None:
    """The top-level response class of a legacy version, if it is one."""
    namespace = RESPONSES.get((api_key, version))
    if namespace is None:
        return None
    return next(c for c in vars(namespace).values() if c.__type__ == EntityType.response)


for _v in (0, 1, 2):
    _produce(_v)
_list_offsets_v0()
_create_topics(0)
_create_topics(1)
_describe_configs_v0()
_offset_for_leader_epoch(0)
_offset_for_leader_epoch(1)
for _v in (0, 1, 2, 3):
    _controlled_shutdown(_v)
