"""IncrementalAlterConfigs (API key 44), versions 0-1: SET and DELETE on topics."""

from __future__ import annotations

from typing import Any

from chronik.broker import topic_configs
from chronik.broker.context import RequestContext
from chronik.protocol import errors

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    responses = []
    for resource in request.resources:
        set_configs: dict[str, str] = {}
        delete: list[str] = []
        unsupported = False
        for c in resource.configs:
            if c.config_operation == SET:
                set_configs[c.name] = c.value
            elif c.config_operation == DELETE:
                delete.append(c.name)
            else:
                unsupported = True
        if unsupported:
            responses.append(
                ctx.build(
                    "AlterConfigsResourceResponse",
                    error_code=errors.INVALID_REQUEST,
                    error_message="APPEND and SUBTRACT are not supported",
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
            continue
        responses.append(
            topic_configs.apply(ctx, resource, set_configs, delete, request.validate_only)
        )
    return ctx.build("IncrementalAlterConfigsResponse", throttle_time=0, responses=tuple(responses))
