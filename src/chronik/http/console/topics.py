"""The console's topics: the paged list (Metadata, cached; then for the page's topics only
ListOffsets at their leaders, DescribeLogDirs for their size and DescribeConfigs for
their retention), one topic's partitions and configs, and CreateTopics, DeleteTopics
(sent to the controller) and IncrementalAlterConfigs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chronik.http.console.kafka import (
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    EARLIEST,
    INCREMENTAL_ALTER_CONFIGS,
    LATEST,
    KafkaSession,
    check,
    entity,
    leaders,
)
from chronik.http.console.overview import log_sizes
from chronik.http.console.params import bool_param, field_of, page
from chronik.http.server import HttpError

TOPIC_RESOURCE = 2
SET, DELETE = 0, 1
MAX_CONFIGS = 1000
# Samples of summed end offsets kept per session for messages per second; past this
# many topics the samples start again.
MAX_RATE_SAMPLES = 10_000
RATE_MIN_INTERVAL = 1.0
SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
}


def is_internal(topic: Any) -> bool:
    return bool(topic.is_internal) or str(topic.name).startswith("__")


# Rates: (time of the sample, summed end offsets, the rate then) per topic.
Rates = dict[str, tuple[float, int, float | None]]


async def list_topics(kafka: KafkaSession, rates: Rates, query: dict[str, str]) -> dict[str, Any]:
    meta = await kafka.metadata()
    internal = bool_param(query, "internal", False)
    visible = [
        t for t in meta.topics if not int(t.error_code) and (internal or not is_internal(t))
    ]
    total, chosen = page(query, visible, lambda t: str(t.name))
    led: dict[tuple[str, int], int] = {}
    for topic in chosen:
        led.update(leaders(topic))
    by_leader: dict[int, dict[str, list[int]]] = {}
    for (name, index), leader in led.items():
        if leader >= 0:
            by_leader.setdefault(leader, {}).setdefault(name, []).append(index)
    names = [t.name for t in chosen]
    earliest, latest, configs, *sizes = await asyncio.gather(
        kafka.list_offsets(led, EARLIEST),
        kafka.list_offsets(led, LATEST),
        describe_configs(kafka, names, ("retention.ms",), missing_ok=True),
        *(log_sizes(kafka, node, topics) for node, topics in by_leader.items()),
    )
    size: dict[tuple[str, int], int] = {}
    for found in sizes:
        size.update(found)
    now = time.monotonic()
    if len(rates) > MAX_RATE_SAMPLES:
        rates.clear()
    items = []
    for topic in chosen:
        keys = [(topic.name, int(p.partition_index)) for p in topic.partitions]
        complete = all(k in latest and k in earliest for k in keys)
        messages = sum(latest[k] - earliest[k] for k in keys if k in latest and k in earliest)
        end_sum = sum(latest.get(k, 0) for k in keys)
        retention = None
        for entry in configs.get(topic.name, ()):
            if entry["name"] == "retention.ms":
                retention = entry["value"]
        items.append(
            {
                "name": topic.name,
                "partitions": len(topic.partitions),
                "replication_factor": max((len(p.replica_nodes) for p in topic.partitions),
                                          default=0),
                "internal": is_internal(topic),
                "size_bytes": sum(size[k] for k in keys) if all(k in size for k in keys)
                else None,
                "messages": messages,
                "retention_ms": retention,
                "messages_per_sec": _rate(rates, topic.name, now, end_sum) if complete else None,
            }
        )
    return {"total": total, "items": items}


def _rate(rates: Rates, topic: str, now: float, end_sum: int) -> float | None:
    previous = rates.get(topic)
    if previous is None:
        rates[topic] = (now, end_sum, None)
        return None
    at, ends, rate = previous
    if now - at < RATE_MIN_INTERVAL:
        return rate
    rate = round(max(0, end_sum - ends) / (now - at), 3)
    rates[topic] = (now, end_sum, rate)
    return rate


async def describe_topic(kafka: KafkaSession, name: str) -> dict[str, Any]:
    topic = await kafka.topic_metadata(name)
    led = leaders(topic)
    earliest, latest, configs = await asyncio.gather(
        kafka.list_offsets(led, EARLIEST),
        kafka.list_offsets(led, LATEST),
        describe_configs(kafka, [name], None, missing_ok=True),
    )
    partitions = []
    for p in sorted(topic.partitions, key=lambda p: int(p.partition_index)):
        key = (name, int(p.partition_index))
        partitions.append(
            {
                "partition": int(p.partition_index),
                "leader": int(p.leader_id),
                "replicas": [int(r) for r in p.replica_nodes],
                "isr": [int(r) for r in p.isr_nodes],
                "offline_replicas": [int(r) for r in p.offline_replicas],
                "log_start_offset": earliest.get(key),
                # ListOffsets LATEST answers the high watermark: the end a consumer sees.
                "log_end_offset": latest.get(key),
                "high_watermark": latest.get(key),
            }
        )
    return {
        "name": name,
        "internal": is_internal(topic),
        "partitions": partitions,
        "configs": configs.get(name, []),
    }


async def describe_configs(
    kafka: KafkaSession, names: list[str], keys: tuple[str, ...] | None, missing_ok: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """The configs of ``names`` (only ``keys`` when given), as the console shows them;
    a topic whose configs the principal may not describe is left out with
    ``missing_ok``, else its error is raised."""
    if not names:
        return {}
    resources = tuple(
        entity(DESCRIBE_CONFIGS, "DescribeConfigsResource", resource_type=TOPIC_RESOURCE,
               resource_name=n, configuration_keys=keys)
        for n in names
    )
    response = await kafka.send(DESCRIBE_CONFIGS, resources=resources, include_synonyms=False,
                                include_documentation=False)
    out: dict[str, list[dict[str, Any]]] = {}
    for result in response.results:
        if int(result.error_code):
            if missing_ok:
                continue
            check(result.error_code, result.error_message, f"configs of {result.resource_name!r}")
        out[result.resource_name] = sorted(
            (
                {
                    "name": c.name,
                    "value": None if c.is_sensitive else c.value,
                    "source": SOURCES.get(int(c.config_source), "UNKNOWN"),
                    "read_only": bool(c.read_only),
                    "sensitive": bool(c.is_sensitive),
                }
                for c in result.configs
            ),
            key=lambda c: c["name"],
        )
    return out


async def _controller(kafka: KafkaSession) -> int:
    meta = await kafka.metadata(fresh=True)
    controller = int(meta.controller_id)
    if controller < 0:
        raise HttpError(503, "no_controller", "the cluster has no controller now; try again")
    return controller


async def create_topic(kafka: KafkaSession, doc: dict[str, Any]) -> dict[str, Any]:
    name = field_of(doc, "name", str)
    if not name or len(name) > 249:
        raise HttpError(400, "INVALID_TOPIC_EXCEPTION", "a topic name has 1 to 249 characters")
    partitions = field_of(doc, "partitions", int, -1)
    replication = field_of(doc, "replication_factor", int, -1)
    if not (partitions == -1 or 1 <= partitions <= 1_000_000):
        raise HttpError(400, "INVALID_PARTITIONS", "partitions must be -1 or 1 to 1000000")
    if not (replication == -1 or 1 <= replication <= 32767):
        raise HttpError(400, "INVALID_REPLICATION_FACTOR",
                        "replication_factor must be -1 or 1 to 32767")
    configs = _string_map(field_of(doc, "configs", dict, {}), "configs")
    topic = entity(
        CREATE_TOPICS, "CreatableTopic", name=name, num_partitions=partitions,
        replication_factor=replication, assignments=(),
        configs=tuple(entity(CREATE_TOPICS, "CreatableTopicConfig", name=k, value=v)
                      for k, v in configs.items()),
    )
    node = await _controller(kafka)
    response = await kafka.send(CREATE_TOPICS, node, topics=(topic,),
                                timeout=int(kafka.timeout * 1000), validate_only=False)
    for result in response.topics:
        check(result.error_code, result.error_message, f"cannot create topic {name!r}")
    kafka.forget_metadata()
    return {"name": name}


async def delete_topic(kafka: KafkaSession, name: str) -> dict[str, Any]:
    node = await _controller(kafka)
    response = await kafka.send(DELETE_TOPICS, node, topic_names=(name,),
                                timeout=int(kafka.timeout * 1000))
    for result in response.responses:
        check(result.error_code, result.error_message, f"cannot delete topic {name!r}")
    kafka.forget_metadata()
    return {"deleted": name}


async def alter_configs(kafka: KafkaSession, name: str, doc: dict[str, Any]) -> dict[str, Any]:
    changes = _string_map(field_of(doc, "set", dict, {}), "set")
    removed = field_of(doc, "delete", list, [])
    if not all(isinstance(k, str) and k for k in removed):
        raise HttpError(400, "bad_request", "delete must be a list of config names")
    if not changes and not removed:
        raise HttpError(400, "bad_request", "nothing to change: give set or delete")
    if len(changes) + len(removed) > MAX_CONFIGS:
        raise HttpError(400, "bad_request", f"at most {MAX_CONFIGS} configs at once")
    await kafka.topic_metadata(name)  # 404 for a topic the principal cannot see
    configs = tuple(
        [entity(INCREMENTAL_ALTER_CONFIGS, "AlterableConfig", name=k, config_operation=SET,
                value=v) for k, v in changes.items()]
        + [entity(INCREMENTAL_ALTER_CONFIGS, "AlterableConfig", name=k, config_operation=DELETE,
                  value=None) for k in removed]
    )
    resource = entity(INCREMENTAL_ALTER_CONFIGS, "AlterConfigsResource",
                      resource_type=TOPIC_RESOURCE, resource_name=name, configs=configs)
    response = await kafka.send(INCREMENTAL_ALTER_CONFIGS, resources=(resource,),
                                validate_only=False)
    for result in response.responses:
        check(result.error_code, result.error_message, f"cannot alter configs of {name!r}")
    found = await describe_configs(kafka, [name], None)
    return {"configs": found.get(name, [])}


def _string_map(raw: dict[str, Any], what: str) -> dict[str, str]:
    out = {}
    if len(raw) > MAX_CONFIGS:
        raise HttpError(400, "bad_request", f"at most {MAX_CONFIGS} entries in {what}")
    for key, value in raw.items():
        if not key or isinstance(value, (dict, list)) or value is None:
            raise HttpError(400, "bad_request", f"{what} maps config names to values")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out

