"""SyncGroup (API key 14), versions 0-5.

Members wait here until the leader's assignment is written to __consumer_offsets.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 14
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> Any:
    result = await ctx.broker.coordinator.sync_group(
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
