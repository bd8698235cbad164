"""DescribeGroups (API key 15), versions 0-6.

Needs DESCRIBE on each group, else that group is GROUP_AUTHORIZATION_FAILED with nothing
described. From v3, include_authorized_operations fills authorized_operations (Kafka's
bit set of the principal's operations on the group) for each group described without
error (Kafka's KafkaApis.handleDescribeGroupsRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 15
VERSIONS = (0, 6)

GROUP_ID_NOT_FOUND = 69
# Kafka's "authorized operations not requested" marker.
OPERATIONS_OMITTED = -(2**31)


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.coordinator
    groups = []
    with_operations = ctx.api_version >= 3 and bool(
        getattr(request, "include_authorized_operations", False)
    )
    for group_id in request.groups:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            # DescribeGroupsResponse.groupError: no state, protocol or members.
            groups.append(
                ctx.build(
                    "DescribedGroup",
                    error_code=errors.GROUP_AUTHORIZATION_FAILED,
                    error_message=None,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=OPERATIONS_OMITTED,
                )
            )
            continue
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
                authorized_operations=(
                    ctx.authorized_operations(ResourceType.GROUP, group_id)
                    if with_operations and code == errors.NONE
                    else OPERATIONS_OMITTED
                ),
            )
        )
    return ctx.build("DescribeGroupsResponse", throttle_time=0, groups=tuple(groups))
