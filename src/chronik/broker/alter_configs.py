"""AlterConfigs (API key 33), versions 0-2: replaces a topic's overrides."""

from __future__ import annotations

from typing import Any

from chronik.broker import topic_configs
from chronik.broker.context import RequestContext

API_KEY = 33
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    responses = [
        await topic_configs.apply(
            ctx,
            resource,
            {c.name: c.value for c in resource.configs if c.value is not None},
            [],
            request.validate_only,
            replace=True,
        )
        for resource in request.resources
    ]
    return ctx.build("AlterConfigsResponse", throttle_time=0, responses=tuple(responses))
