"""DeleteGroups (API key 42), versions 0-2. Needs DELETE on each group, else that group is
GROUP_AUTHORIZATION_FAILED and kept (Kafka's KafkaApis.handleDeleteGroupsRequest)."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    names = list(request.groups_names)
    allowed = [n for n in names if ctx.allowed(Operation.DELETE, ResourceType.GROUP, n)]
    if len(allowed) == len(names):
        codes = await ctx.services.coordinator.delete_groups(names)
    else:
        deleted = iter(await ctx.services.coordinator.delete_groups(allowed) if allowed else ())
        permitted = set(allowed)
        codes = [
            next(deleted) if n in permitted else errors.GROUP_AUTHORIZATION_FAILED for n in names
        ]
    results = tuple(
        ctx.build("DeletableGroupResult", group_id=name, error_code=code)
        for name, code in zip(names, codes, strict=True)
    )
    return ctx.build("DeleteGroupsResponse", throttle_time=0, results=results)
