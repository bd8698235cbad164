"""CreatePartitions (API key 37), versions 0-3.

Each topic needs ALTER on the Topic, else TOPIC_AUTHORIZATION_FAILED ("The topic
authorization is failed.") and nothing changes, as Kafka's KafkaApis.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.broker.topics import partition_count, too_many_partitions
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.security.acl_model import Operation, ResourceType
from chronik.storage.catalog import run_stepwise

API_KEY = 37
VERSIONS = (0, 3)


async def _grow_in_cluster(ctx: RequestContext, request: Any, wanted: Any) -> tuple[int, Any]:
    assignments = [list(a.broker_ids) for a in wanted.assignments or ()]
    try:
        await ctx.services.cluster.create_partitions(
            wanted.name,
            wanted.count,
            assignments or None,
            validate_only=request.validate_only,
            timeout_ms=millis(request.timeout),
        )
    except Exception as exc:
        code = getattr(exc, "code", None)
        if code is None:
            raise
        return code, str(exc)
    return errors.NONE, None


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.services.catalog
    cluster = ctx.services.cluster
    results = []
    refused = {
        t.name
        for t in request.topics
        if not ctx.allowed(Operation.ALTER, ResourceType.TOPIC, t.name)
    }
    authorized = [t for t in request.topics if t.name not in refused]
    over_limit = too_many_partitions(ctx.services, _requested_partitions(ctx.services, authorized))
    for wanted in request.topics:
        code, message = errors.NONE, None
        topic = catalog.get(wanted.name)
        if wanted.name in refused:
            code = errors.TOPIC_AUTHORIZATION_FAILED
            message = "The topic authorization is failed."
        elif over_limit is not None:
            code, message = errors.POLICY_VIOLATION, over_limit
        elif cluster is not None:
            code, message = await _grow_in_cluster(ctx, request, wanted)
        elif topic is None:
            code, message = (
                errors.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic.",
            )
        elif wanted.count <= len(topic.partitions):
            code = errors.INVALID_PARTITIONS
            message = (
                f"Topic currently has {len(topic.partitions)} partitions, "
                f"which is higher than the requested {wanted.count}."
            )
        else:
            try:
                steps = catalog.create_partitions_steps(
                    wanted.name, wanted.count, validate_only=request.validate_only
                )
                await run_stepwise(steps)
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                message = str(exc)
        results.append(
            ctx.build(
                "CreatePartitionsTopicResult",
                name=wanted.name,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.build("CreatePartitionsResponse", throttle_time=0, results=tuple(results))


def _requested_partitions(broker: Services, topics: list[Any]) -> int:
    """New partitions the request asks for."""
    total = 0
    for wanted in topics:
        current = partition_count(broker, wanted.name)
        if current is not None:
            total += max(0, wanted.count - current)
    return total
