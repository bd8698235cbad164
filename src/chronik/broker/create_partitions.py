"""CreatePartitions (API key 37), versions 0-3."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors

API_KEY = 37
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    catalog = ctx.broker.catalog
    results = []
    for wanted in request.topics:
        code, message = errors.NONE, None
        topic = catalog.get(wanted.name)
        if topic is None:
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
        elif not request.validate_only:
            try:
                catalog.create_partitions(wanted.name, wanted.count)
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
