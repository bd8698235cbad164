"""SyncGroup (API key 14), versions 0-5.

Members wait here until the leader's assignment is written to __consumer_offsets.
Needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's
KafkaApis.handleSyncGroupRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 14
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return ctx.build(
            "SyncGroupResponse",
            throttle_time=0,
            error_code=errors.GROUP_AUTHORIZATION_FAILED,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    result = await ctx.services.coordinator.sync_group(
        group_id=request.group_id,
        generation=request.generation_id,
        member_id=request.member_id,
        instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return ctx.build(
        "SyncGroupResponse",
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
