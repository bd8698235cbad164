"""Heartbeat (API key 12), versions 0-4."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Any) -> Any:
    code = ctx.broker.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return ctx.build("HeartbeatResponse", throttle_time=0, error_code=code)
