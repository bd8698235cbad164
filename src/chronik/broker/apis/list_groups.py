"""ListGroups (API key 16), versions 0-5; v4 filters by state, v5 by group type.

DESCRIBE on the cluster lists every group; without it only the groups the principal may
DESCRIBE are listed (Kafka's KafkaApis.handleListGroupsRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 16
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.services.coordinator
    # Only the groups of the __consumer_offsets partitions this broker serves; while one
    # is being loaded the listing is incomplete, which Kafka says with an error.
    code = coordinator.listing_error()
    listed = coordinator.list_groups(
        getattr(request, "states_filter", ()) or (),
        getattr(request, "types_filter", ()) or (),
    )
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        listed = [g for g in listed if ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, g[0])]
    groups = tuple(
        ctx.build(
            "ListedGroup",
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=state,
            group_type="classic",
        )
        for group_id, protocol_type, state in listed
    )
    return ctx.build("ListGroupsResponse", throttle_time=0, error_code=code, groups=groups)
