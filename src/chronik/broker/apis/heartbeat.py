"""Heartbeat (API key 12), versions 0-4. Needs READ on the group, else
GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis.handleHeartbeatRequest)."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return ctx.build(
            "HeartbeatResponse", throttle_time=0, error_code=errors.GROUP_AUTHORIZATION_FAILED
        )
    code = ctx.services.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return ctx.build("HeartbeatResponse", throttle_time=0, error_code=code)
