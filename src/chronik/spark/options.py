"""Options of the ``chronik`` source and sink, spelled and interpreted as Spark's Kafka source.

Offsets JSON is Spark's: ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest, -1 = latest;
timestamps JSON is ``{"topic": {"0": 1700000000000}}`` in epoch milliseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chronik.security.client_settings import translate

EARLIEST = -2
LATEST = -1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
SINK_LOG_PREFIX = "_chronik_sink."

# librdkafka prints its own lines on stderr from its log_level 6 (info) down, so a job's
# output gets lines such as "%6|...|BGQUEUE|rdkafka#producer-10| [thrd:background]: Purging
# 1 unserved events from background queue" (a client closed with an event not yet served).
# Spark logs at WARN by default; the clients made here log warnings and errors only, still
# on stderr. kafka.log_level overrides it (7, with kafka.debug, for librdkafka's debug lines).
LIBRDKAFKA_LOG_LEVEL = "4"


def quiet(conf: Mapping[str, object]) -> dict[str, object]:
    """A librdkafka client config that logs warnings and errors only, unless it sets
    ``log_level`` itself."""
    return {"log_level": LIBRDKAFKA_LOG_LEVEL, **conf}

# librdkafka settings the reader picks for large sequential reads; a user's kafka.* wins.
_READ_DEFAULTS = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "fetch.max.bytes": str(64 << 20),
    "max.partition.fetch.bytes": str(16 << 20),
    "queued.max.messages.kbytes": str(256 << 10),
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever its queue
    # holds queued.min.messages; with the defaults a fast reader stalls a second at a time.
    "queued.min.messages": "1000000",
    "fetch.queue.backoff.ms": "5",
    "fetch.wait.max.ms": "100",
}


class OptionError(ValueError):
    pass


@dataclass(frozen=True)
class Subscription:
    """Exactly one of subscribe / subscribePattern / assign, as Spark requires."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            # Like Kafka's exclude.internal.topics, and the sink's own logs are never data.
            if topic in INTERNAL_TOPICS or topic.startswith(SINK_LOG_PREFIX):
                return False
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign is not None:
            return topic in self.assign
        return topic in self.topics


@dataclass(frozen=True)
class StartSpec:
    """Where reading starts: a keyword, per-partition offsets, or timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int | None = None
    by_partition_ts: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    kafka: dict[str, str]
    subscription: Subscription
    starting: StartSpec
    ending: StartSpec
    ts_strategy: str
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_s: float
    reader: str = "fetch"  # or "librdkafka"
    # Schema'd keys/values to decode (chronik.spark.schema_options.DecodePlan), or None.
    decode: Any = None

    def consumer_config(self) -> dict[str, str]:
        conf = dict(_READ_DEFAULTS)
        conf["group.id"] = "chronik-spark-reader"  # librdkafka insists; never joined or committed
        conf.update(self.kafka)
        return conf


def kafka_config(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, prefix dropped, for librdkafka."""
    conf = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    # Spark's Kafka source takes Java's names (kafka.sasl.jaas.config,
    # kafka.ssl.truststore.location): they become librdkafka's.
    try:
        return translate(conf)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


def _reader(options: Mapping[str, str]) -> str:
    value = options.get("reader", "fetch").strip().lower()
    if value not in ("fetch", "librdkafka"):
        raise OptionError(f"option 'reader' must be fetch or librdkafka, got {value!r}")
    return value


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be true or false, got {value!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {value!r}")
    return number


def _partition_map(text: str, name: str) -> dict[str, dict[int, int]]:
    try:
        raw = json.loads(text)
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option '{name}' is not valid JSON like {{\"t\":{{\"0\":5}}}}") from None


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set"
        )
    which = given[0]
    value = options[which]
    if which == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if which == "subscribePattern":
        return Subscription(pattern=value)
    try:
        raw = json.loads(value)
        assign = {t: tuple(int(p) for p in parts) for t, parts in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError("option 'assign' is not valid JSON like {\"t\":[0,1]}") from None
    return Subscription(assign=assign)


def _offsets_spec(
    options: Mapping[str, str], name: str, default: str, streaming: bool
) -> StartSpec:
    prefix = "starting" if name == "startingOffsets" else "ending"
    ts = options.get(f"{prefix}Timestamp")
    if ts is not None:
        return StartSpec("timestamp", timestamp=int(ts))
    by_ts = options.get(f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return StartSpec("timestamps", by_partition_ts=_partition_map(by_ts, name))
    text = options.get(name, default).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if name == "startingOffsets" and kind == "latest" and not streaming:
            raise OptionError("startingOffsets=latest is not allowed for batch queries")
        if name == "endingOffsets" and kind == "earliest":
            raise OptionError("endingOffsets=earliest is not allowed")
        return StartSpec(kind)
    offsets = _partition_map(text, name)
    for parts in offsets.values():
        for off in parts.values():
            if name == "startingOffsets" and off == LATEST and not streaming:
                raise OptionError("startingOffsets may not use -1 (latest) for batch queries")
            if name == "endingOffsets" and off == EARLIEST:
                raise OptionError("endingOffsets may not use -2 (earliest)")
    return StartSpec("offsets", offsets=offsets)


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    if streaming and any(
        k in options for k in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
    ):
        raise OptionError("ending offsets options are for batch queries only")
    strategy = options.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")
    return ReadOptions(
        kafka=kafka_config(options),
        subscription=parse_subscription(options),
        starting=_offsets_spec(
            options, "startingOffsets", "latest" if streaming else "earliest", streaming
        ),
        ending=_offsets_spec(options, "endingOffsets", "latest", streaming),
        ts_strategy=strategy,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(options, "minPartitions"),
        fail_on_data_loss=option_bool(options, "failOnDataLoss", True),
        include_headers=option_bool(options, "includeHeaders", False),
        poll_timeout_s=int(options.get("kafkaConsumer.pollTimeoutMs", "120000")) / 1000,
        reader=_reader(options),
    )
