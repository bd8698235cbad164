"""CreatePartitions (API key 37), versions 0-3."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import run_stepwise, too_many_partitions
from chronik.protocol import errors

API_KEY = 37
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.broker.catalog
    results = []
    over_limit = too_many_partitions(ctx.broker, _requested_partitions(catalog, request))
    for wanted in request.topics:
        code, message = errors.NONE, None
        topic = catalog.get(wanted.name)
        if over_limit is not None:
            code, message = errors.POLICY_VIOLATION, over_limit
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


def _requested_partitions(catalog: Any, request: Any) -> int:
    total = 0
    for wanted in request.topics:
        topic = catalog.get(wanted.name)
        if topic is not None:
            total += max(0, wanted.count - len(topic.partitions))
    return total
