"""Topic (log) configuration: Kafka's topic config names, their broker synonyms and defaults.

A value is resolved as Kafka does: a topic override wins, then the broker setting (the
first synonym that is set, e.g. log.retention.ms before log.retention.minutes before
log.retention.hours), then Kafka's documented default.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, NamedTuple

from chronik.schemas.subject_names import DEFAULT_STRATEGY, STRATEGIES, strategy_name
from chronik.storage.errors import InvalidConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# DescribeConfigs config sources and types (Kafka's ConfigSource / ConfigType enums).
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

TYPE_BOOLEAN = 1
TYPE_STRING = 2
TYPE_INT = 3
TYPE_SHORT = 4
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7


class Synonym(NamedTuple):
    """A broker config that sets a topic config; ``scale`` turns its unit into the topic's."""

    name: str
    scale: int = 1


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: int
    default: str
    synonyms: tuple[Synonym, ...]
    doc: str
    check: Callable[[Any], bool] = lambda v: True
    expect: str = ""
    attr: str | None = None  # the LogConfig field it fills, if any


def _at_least(n: float) -> Callable[[Any], bool]:
    return lambda v: v >= n


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _policy(v: str) -> bool:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    return bool(parts) and all(p in ("delete", "compact") for p in parts)


def _throttled_replicas(v: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: ``*`` or partition:broker pairs."""
    return v == "*" or all(re.fullmatch(r"[0-9]+:[0-9]+", p) for p in v.split(",") if p)


# Releases a message.format.version may name (Kafka 3.x's MetadataVersion short versions).
_FORMAT_RELEASES = frozenset(
    ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0", "1.1"]
    + [f"2.{n}" for n in range(9)]
    + [f"3.{n}" for n in range(10)]
)


def _format_version(v: str) -> bool:
    """Kafka's MetadataVersion.fromVersionString: the first three dotted parts of a 0.x
    version, the first two of any other, each optionally with an -IVn suffix."""
    parts = v.split(".")
    key = ".".join(parts[: 3 if v.startswith("0.") else 2])
    return re.sub(r"-IV[0-9]+$", "", key) in _FORMAT_RELEASES


def _strategy(v: str) -> bool:
    return strategy_name(v) is not None


_STRATEGY_EXPECT = "one of " + ", ".join(STRATEGIES) + " (with or without the package prefix)"

_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TS_TYPES = ("CreateTime", "LogAppendTime")


def _def(name, type_, default, synonyms, doc, check=None, expect="", attr=None) -> ConfigDef:
    syns = tuple(s if isinstance(s, Synonym) else Synonym(s) for s in synonyms)
    return ConfigDef(name, type_, default, syns, doc, check or (lambda v: True), expect, attr)


_H = 3_600_000
_M = 60_000

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _def("cleanup.policy", TYPE_LIST, "delete", ["log.cleanup.policy"],
             "Retention policy for old segments: delete, compact or both.",
             _policy, "a list of delete and/or compact", "cleanup_policy"),
        _def("compression.type", TYPE_STRING, "producer", ["compression.type"],
             "Final compression of the topic's batches; producer keeps the producer's codec.",
             _one_of(*_COMPRESSION), "one of " + ", ".join(_COMPRESSION), "compression_type"),
        # Confluent Server's broker-side schema validation (chronik.broker.schema_validation).
        _def("confluent.key.schema.validation", TYPE_BOOLEAN, "false", [],
             "Refuse records whose key does not carry the id of a schema registered under "
             "the key's subject (needs schema.registry.listen).",
             attr="key_schema_validation"),
        _def("confluent.key.subject.name.strategy", TYPE_STRING, DEFAULT_STRATEGY, [],
             "How the subject of a record's key schema is named: TopicNameStrategy, "
             "RecordNameStrategy or TopicRecordNameStrategy.",
             _strategy, _STRATEGY_EXPECT, "key_subject_name_strategy"),
        _def("confluent.value.schema.validation", TYPE_BOOLEAN, "false", [],
             "Refuse records whose value does not carry the id of a schema registered under "
             "the value's subject (needs schema.registry.listen).",
             attr="value_schema_validation"),
        _def("confluent.value.subject.name.strategy", TYPE_STRING, DEFAULT_STRATEGY, [],
             "How the subject of a record's value schema is named: TopicNameStrategy, "
             "RecordNameStrategy or TopicRecordNameStrategy.",
             _strategy, _STRATEGY_EXPECT, "value_subject_name_strategy"),
        _def("follower.replication.throttled.replicas", TYPE_LIST, "", [],
             "In a cluster, the partitions each named broker throttles as a follower not in "
             "the ISR (follower.replication.throttled.rate): * or partition:broker pairs.",
             _throttled_replicas,
             "* or a list of partition:broker pairs"),
        _def("key.versioning.enable", TYPE_BOOLEAN, "false", [],
             "chronik's event store: number each key's records (the chronik-version header) "
             "and honour chronik-expected-version on append, with a per-key index.",
             attr="key_versioning"),
        _def("leader.replication.throttled.replicas", TYPE_LIST, "", [],
             "In a cluster, the partitions each named broker throttles as leader to "
             "followers not in the ISR (leader.replication.throttled.rate): * or "
             "partition:broker pairs.", _throttled_replicas,
             "* or a list of partition:broker pairs"),
        _def("delete.retention.ms", TYPE_LONG, "86400000", ["log.cleaner.delete.retention.ms"],
             "How long tombstones are kept on compacted topics.",
             _at_least(0), ">= 0", "delete_retention_ms"),
        _def("file.delete.delay.ms", TYPE_LONG, "60000", ["log.segment.delete.delay.ms"],
             "Accepted for compatibility; segments are deleted at once.", _at_least(0), ">= 0"),
        _def("flush.messages", TYPE_LONG, str(LONG_MAX), ["log.flush.interval.messages"],
             "fsync the log after this many messages.",
             _at_least(1), ">= 1", "flush_interval_messages"),
        _def("flush.ms", TYPE_LONG, str(LONG_MAX),
             ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
             "fsync the log when data has been unflushed this long.",
             _at_least(0), ">= 0", "flush_interval_ms"),
        _def("index.interval.bytes", TYPE_INT, "4096", ["log.index.interval.bytes"],
             "Bytes of log between two offset index entries.",
             _at_least(0), ">= 0", "index_interval_bytes"),
        _def("max.compaction.lag.ms", TYPE_LONG, str(LONG_MAX),
             ["log.cleaner.max.compaction.lag.ms"],
             "Longest time a record stays uncompacted.", _at_least(1), ">= 1",
             "max_compaction_lag_ms"),
        _def("max.message.bytes", TYPE_INT, "1048588", ["message.max.bytes"],
             "Largest record batch the topic accepts.",
             _at_least(0), ">= 0", "max_message_bytes"),
        _def("message.downconversion.enable", TYPE_BOOLEAN, "true",
             ["log.message.downconversion.enable"],
             "Deprecated in Kafka 3.x; accepted and ignored (fetches are never down-converted)."),
        _def("message.format.version", TYPE_STRING, "3.0-IV1", ["log.message.format.version"],
             "Deprecated in Kafka 3.x; accepted and ignored: batches are always format v2.",
             _format_version, "a Kafka version such as 0.10.0 or 3.0-IV1"),
        _def("message.timestamp.after.max.ms", TYPE_LONG, str(LONG_MAX),
             ["log.message.timestamp.after.max.ms"],
             "Accepted; timestamps ahead of the broker clock are not rejected.", _at_least(0),
             ">= 0"),
        _def("message.timestamp.before.max.ms", TYPE_LONG, str(LONG_MAX),
             ["log.message.timestamp.before.max.ms"],
             "Accepted; old timestamps are not rejected.", _at_least(0), ">= 0"),
        _def("message.timestamp.difference.max.ms", TYPE_LONG, str(LONG_MAX),
             ["log.message.timestamp.difference.max.ms"],
             "Deprecated in Kafka 3.x; accepted, timestamps are not rejected.", _at_least(0),
             ">= 0"),
        _def("message.timestamp.type", TYPE_STRING, "CreateTime",
             ["log.message.timestamp.type"],
             "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
             _one_of(*_TS_TYPES), "CreateTime or LogAppendTime", "message_timestamp_type"),
        _def("min.cleanable.dirty.ratio", TYPE_DOUBLE, "0.5", ["log.cleaner.min.cleanable.ratio"],
             "Share of uncompacted log that triggers compaction.",
             lambda v: 0 <= v <= 1, "between 0 and 1", "min_cleanable_dirty_ratio"),
        _def("min.compaction.lag.ms", TYPE_LONG, "0", ["log.cleaner.min.compaction.lag.ms"],
             "Shortest time a record stays uncompacted.", _at_least(0), ">= 0",
             "min_compaction_lag_ms"),
        _def("min.insync.replicas", TYPE_INT, "1", ["min.insync.replicas"],
             "Accepted; a single node is always the whole ISR.", _at_least(1), ">= 1",
             "min_insync_replicas"),
        _def("preallocate", TYPE_BOOLEAN, "false", ["log.preallocate"],
             "Accepted; segment files are not preallocated."),
        _def("retention.bytes", TYPE_LONG, "-1", ["log.retention.bytes"],
             "Largest size of a partition before old segments are deleted; -1 = no limit.",
             _at_least(-1), ">= -1", "retention_bytes"),
        _def("retention.ms", TYPE_LONG, "604800000",
             ["log.retention.ms", Synonym("log.retention.minutes", _M),
              Synonym("log.retention.hours", _H)],
             "How long segments are kept before deletion; -1 = forever.",
             _at_least(-1), ">= -1", "retention_ms"),
        _def("segment.bytes", TYPE_INT, "1073741824", ["log.segment.bytes"],
             "Segment file size at which the log rolls.",
             _at_least(14), ">= 14", "segment_bytes"),
        _def("segment.index.bytes", TYPE_INT, "10485760", ["log.index.size.max.bytes"],
             "Largest offset index of a segment; a full index rolls the log.",
             _at_least(8), ">= 8", "segment_index_bytes"),
        _def("segment.jitter.ms", TYPE_LONG, "0",
             ["log.roll.jitter.ms", Synonym("log.roll.jitter.hours", _H)],
             "Accepted; rolls are not jittered.", _at_least(0), ">= 0"),
        _def("segment.ms", TYPE_LONG, "604800000",
             ["log.roll.ms", Synonym("log.roll.hours", _H)],
             "Age at which the log rolls even if the segment is not full.",
             _at_least(1), ">= 1", "segment_ms"),
        _def("unclean.leader.election.enable", TYPE_BOOLEAN, "false",
             ["unclean.leader.election.enable"], "Single node: no effect."),
    ]
}

# Broker-level settings the log also reads (not topic configs).
BROKER_DEFAULTS = {
    "producer.id.expiration.ms": "86400000",
}


def _parse(d: ConfigDef, raw: str) -> Any:
    text = str(raw).strip()
    if d.type in (TYPE_INT, TYPE_LONG, TYPE_SHORT):
        return int(text)
    if d.type == TYPE_DOUBLE:
        return float(text)
    if d.type == TYPE_BOOLEAN:
        low = text.lower()
        if low not in ("true", "false"):
            raise ValueError(text)
        return low == "true"
    if d.type == TYPE_LIST:
        return ",".join(p.strip() for p in text.split(",") if p.strip())
    return text


def parse_value(name: str, raw: str) -> Any:
    """Parse and validate one topic config value; raise InvalidConfig if it is bad."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    try:
        value = _parse(d, raw)
    except (TypeError, ValueError):
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}") from None
    if d.type in (TYPE_INT, TYPE_SHORT) and not -(2**31) <= value <= INT_MAX:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: out of int range")
    if d.type == TYPE_LONG and not -(2**63) <= value <= LONG_MAX:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: out of long range")
    if not d.check(value):
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: must be {d.expect}")
    return value


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, raw in configs.items():
        if raw is None:
            raise InvalidConfig(f"Null value not supported for topic config {name}")
        parse_value(name, raw)


def _broker_value(d: ConfigDef, broker: Mapping[str, str]) -> tuple[str, str] | None:
    """The (synonym name, value in topic units) from the first synonym the broker sets."""
    for syn in d.synonyms:
        raw = broker.get(syn.name)
        if raw is None:
            continue
        if syn.scale == 1:
            return syn.name, str(raw).strip()
        try:
            n = int(str(raw).strip())
        except ValueError:
            continue
        return syn.name, str(n * syn.scale if n >= 0 else n)
    return None


def _layers(
    broker: Mapping[str, str],
    dynamic: Mapping[str, str] | None,
    dynamic_default: Mapping[str, str] | None,
) -> list[tuple[Mapping[str, str], int]]:
    """The broker settings in Kafka's order: this broker's dynamic configs, the cluster's
    dynamic default, the static settings."""
    return [
        (dynamic or {}, SOURCE_DYNAMIC_BROKER),
        (dynamic_default or {}, SOURCE_DYNAMIC_DEFAULT_BROKER),
        (broker, SOURCE_STATIC_BROKER),
    ]


def resolve(
    name: str,
    broker: Mapping[str, str],
    topic: Mapping[str, str],
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """(value, source) of one topic config."""
    d = TOPIC_CONFIGS[name]
    if name in topic and topic[name] is not None:
        return str(topic[name]), SOURCE_TOPIC
    for layer, source in _layers(broker, dynamic, dynamic_default):
        found = _broker_value(d, layer)
        if found is not None:
            return found[1], source
    return d.default, SOURCE_DEFAULT


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    min_insync_replicas: int = 1
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    producer_id_expiration_ms: int = 86400000
    key_versioning: bool = False
    key_schema_validation: bool = False
    value_schema_validation: bool = False
    key_subject_name_strategy: str = DEFAULT_STRATEGY
    value_subject_name_strategy: str = DEFAULT_STRATEGY
    overrides: frozenset[str] = field(default=frozenset(), compare=False)

    @cached_property
    def schema_validation(self) -> bool:
        """Keys or values are checked against the schema registry on produce."""
        return self.key_schema_validation or self.value_schema_validation

    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_configs(
        cls, broker: Mapping[str, str] | None = None, topic: Mapping[str, str] | None = None
    ) -> LogConfig:
        """Topic override > broker setting > Kafka default. Bad broker values fall back."""
        broker = broker or {}
        topic = topic or {}
        values: dict[str, Any] = {}
        for d in TOPIC_CONFIGS.values():
            if d.attr is None:
                continue
            raw, source = resolve(d.name, broker, topic)
            try:
                values[d.attr] = parse_value(d.name, raw)
            except InvalidConfig:
                if source == SOURCE_TOPIC:
                    raise
                values[d.attr] = parse_value(d.name, d.default)
        raw = broker.get("producer.id.expiration.ms", BROKER_DEFAULTS["producer.id.expiration.ms"])
        if str(raw).strip().lstrip("-").isdigit():
            values["producer_id_expiration_ms"] = int(raw)
        values["overrides"] = frozenset(topic)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


class ConfigSynonym(NamedTuple):
    name: str
    value: str
    source: int


class ConfigEntry(NamedTuple):
    name: str
    value: str
    source: int
    is_sensitive: bool
    read_only: bool
    synonyms: list[ConfigSynonym]
    config_type: int
    documentation: str


def describe_topic_configs(
    broker: Mapping[str, str],
    topic: Mapping[str, str],
    names: list[str] | None = None,
    dynamic: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every topic config (or those in ``names`` that exist) with value, source and synonyms,
    in the order DescribeConfigs lists synonyms: topic override, this broker's dynamic
    config, the cluster's dynamic default, static broker settings, default."""
    entries = []
    for name in names if names is not None else sorted(TOPIC_CONFIGS):
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            continue
        value, source = resolve(name, broker, topic, dynamic, dynamic_default)
        synonyms = []
        if name in topic and topic[name] is not None:
            synonyms.append(ConfigSynonym(name, str(topic[name]), SOURCE_TOPIC))
        for layer, layer_source in _layers(broker, dynamic, dynamic_default):
            for syn in d.synonyms:
                if syn.name in layer:
                    synonyms.append(ConfigSynonym(syn.name, str(layer[syn.name]), layer_source))
        if d.synonyms:  # a config without a broker setting lists no default synonym
            synonyms.append(ConfigSynonym(d.synonyms[0].name, d.default, SOURCE_DEFAULT))
        entries.append(ConfigEntry(name, value, source, False, False, synonyms, d.type, d.doc))
    return entries
