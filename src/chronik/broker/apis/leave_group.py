"""LeaveGroup (API key 13), versions 0-5; v3+ removes a batch of members (KIP-345).

Needs READ on the group, else GROUP_AUTHORIZATION_FAILED at the top level with no members
(Kafka's KafkaApis.handleLeaveGroupRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return ctx.build(
            "LeaveGroupResponse",
            throttle_time=0,
            error_code=errors.GROUP_AUTHORIZATION_FAILED,
            members=(),
        )
    if ctx.api_version < 3:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    top, results = ctx.services.coordinator.leave_group(request.group_id, leaving)
    if ctx.api_version < 3:
        code = top if top or not results else results[0][2]
        return ctx.build("LeaveGroupResponse", throttle_time=0, error_code=code)
    members = tuple(
        ctx.build("MemberResponse", member_id=m, group_instance_id=i, error_code=e)
        for m, i, e in results
    )
    return ctx.build("LeaveGroupResponse", throttle_time=0, error_code=top, members=members)
