"""LeaveGroup (API key 13), versions 0-5; v3+ removes a batch of members (KIP-345)."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version < 3:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    top, results = ctx.broker.coordinator.leave_group(request.group_id, leaving)
    if ctx.api_version < 3:
        code = top if top or not results else results[0][2]
        return ctx.build("LeaveGroupResponse", throttle_time=0, error_code=code)
    members = tuple(
        ctx.build("MemberResponse", member_id=m, group_instance_id=i, error_code=e)
        for m, i, e in results
    )
    return ctx.build("LeaveGroupResponse", throttle_time=0, error_code=top, members=members)
