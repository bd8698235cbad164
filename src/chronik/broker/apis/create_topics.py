"""CreateTopics (API key 19), versions 0-7.

Authorization as Kafka's KafkaApis: each topic needs CREATE on the Cluster or on the
Topic (else TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", nothing created); v5+
answers a created topic's id, counts and configs only with DESCRIBE_CONFIGS on it (else
topic_config_error_code TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.broker.topics import too_many_partitions
from chronik.protocol import errors
from chronik.protocol.compat import ZERO_UUID, millis
from chronik.security.acl_model import Operation, ResourceType
from chronik.storage.catalog import run_stepwise
from chronik.storage.config import describe_topic_configs

API_KEY = 19
VERSIONS = (0, 7)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    results = []
    on_cluster = ctx.allowed_on_cluster(Operation.CREATE)
    refused = {
        t.name
        for t in request.topics
        if not on_cluster and not ctx.allowed(Operation.CREATE, ResourceType.TOPIC, t.name)
    }
    authorized = [t for t in request.topics if t.name not in refused]
    over_limit = too_many_partitions(broker, _requested_partitions(broker, authorized))
    for wanted in request.topics:
        name = wanted.name
        partitions = wanted.num_partitions
        replication = wanted.replication_factor
        configs = {c.name: c.value for c in wanted.configs}
        code, message, topic = errors.NONE, None, None
        if wanted.assignments:
            partitions = len(wanted.assignments)
            replication = len(wanted.assignments[0].broker_ids)
        if partitions == -1:
            partitions = broker.config.num_partitions
        if replication == -1:
            replication = broker.config.default_replication_factor
        if name in refused:
            code, message = errors.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        elif over_limit is not None:
            code, message = errors.POLICY_VIOLATION, over_limit
        elif broker.cluster is not None:
            code, message, topic = await _create_in_cluster(ctx, request, wanted, partitions,
                                                            replication, configs)
        elif replication != 1:
            code = errors.INVALID_REPLICATION_FACTOR
            message = f"Replication factor must be 1 on a single-node broker, got {replication}"
        else:
            try:
                steps = broker.catalog.create_topic_steps(
                    name,
                    partitions,
                    configs,
                    validate_only=getattr(request, "validate_only", False),
                )
                topic = await run_stepwise(steps)
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                message = str(exc)
        results.append(
            _result(
                ctx, name, code, message, topic, partitions, replication, configs, name in refused
            )
        )
    return ctx.build("CreateTopicsResponse", throttle_time=0, topics=tuple(results))


async def _create_in_cluster(
    ctx: RequestContext,
    request: Any,
    wanted: Any,
    partitions: int,
    replication: int,
    configs: dict[str, str],
) -> tuple[int, str | None, Any]:
    assignments = {a.partition_index: list(a.broker_ids) for a in wanted.assignments}
    try:
        topic_id = await ctx.services.cluster.create_topic(
            wanted.name,
            partitions,
            replication,
            configs,
            assignments or None,
            validate_only=getattr(request, "validate_only", False),
            timeout_ms=millis(request.timeout),
        )
    except Exception as exc:
        code = getattr(exc, "code", None)
        if code is None:
            raise
        return code, str(exc), None
    return errors.NONE, None, SimpleNamespace(topic_id=topic_id)


def _requested_partitions(broker: Services, topics: list[Any]) -> int:
    """Partitions the request would create, counted as Kafka's controller counts them."""
    total = 0
    for wanted in topics:
        if wanted.assignments:
            total += len(wanted.assignments)
        elif wanted.num_partitions == -1:
            total += broker.config.num_partitions
        elif wanted.num_partitions > 0:
            total += wanted.num_partitions
    return total


def _result(
    ctx: RequestContext,
    name: str,
    code: int,
    message: str | None,
    topic: Any,
    partitions: int,
    replication: int,
    configs: dict[str, str],
    refused: bool = False,
) -> Any:
    entries: tuple[Any, ...] = ()
    config_code = errors.NONE
    if (code == errors.NONE or refused) and not ctx.allowed(
        Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name
    ):
        # As Kafka: a topic created without DESCRIBE_CONFIGS on it is answered without
        # its id, counts and configs; a refused one carries the same config error.
        topic, partitions, replication = None, -1, -1
        config_code = errors.TOPIC_AUTHORIZATION_FAILED
    elif code == errors.NONE and hasattr(ctx.response_module, "CreatableTopicConfigs"):
        entries = tuple(
            ctx.build(
                "CreatableTopicConfigs",
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.is_sensitive,
            )
            for e in describe_topic_configs(
                ctx.services.config.overrides, configs, **ctx.services.dynamic.topic_layers()
            )
        )
    return ctx.build(
        "CreatableTopicResult",
        name=name,
        topic_id=topic.topic_id if topic is not None and hasattr(topic, "topic_id") else ZERO_UUID,
        error_code=code,
        error_message=message,
        topic_config_error_code=config_code,
        num_partitions=partitions if code == errors.NONE else -1,
        replication_factor=replication if code == errors.NONE else -1,
        configs=entries,
    )
