"""DeleteGroups (API key 42), versions 0-2."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    names = list(request.groups_names)
    codes = await ctx.broker.coordinator.delete_groups(names)
    results = tuple(
        ctx.build("DeletableGroupResult", group_id=name, error_code=code)
        for name, code in zip(names, codes, strict=True)
    )
    return ctx.build("DeleteGroupsResponse", throttle_time=0, results=results)
