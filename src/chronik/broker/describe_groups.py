"""DescribeGroups (API key 15), versions 0-6."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 15
VERSIONS = (0, 6)

GROUP_ID_NOT_FOUND = 69
# Kafka's "authorized operations not requested" marker.
OPERATIONS_OMITTED = -(2**31)


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.coordinator
    groups = []
    for group_id in request.groups:
        summary = coordinator.describe_group(group_id)
        code, message = summary.error, None
        if summary.state == "Dead" and ctx.api_version >= 6:
            # KIP-1043: from v6 an unknown group is an error, not a Dead group.
            code, message = GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        members = tuple(
            ctx.build(
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in summary.members
        )
        groups.append(
            ctx.build(
                "DescribedGroup",
                error_code=code,
                error_message=message,
                group_id=group_id,
                group_state=summary.state,
                protocol_type=summary.protocol_type,
                protocol_data=summary.protocol,
                members=members,
                authorized_operations=OPERATIONS_OMITTED,
            )
        )
    return ctx.build("DescribeGroupsResponse", throttle_time=0, groups=tuple(groups))
