"""DeleteAcls (API key 31), versions 1-3.

Needs ALTER on the cluster. Every binding each filter matches is removed, all filters in
one write, and listed in that filter's result; the change applies to the next request.
A filter with an UNKNOWN field is INVALID_REQUEST; without an authorizer every filter is
SECURITY_DISABLED.
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.acl_changes import store_failure, unavailable
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Acl, AclError, AclFilter, Operation

log = logging.getLogger("chronik.security")

API_KEY = 31
VERSIONS = (1, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    filters = request.filters
    refused = unavailable(ctx, Operation.ALTER)
    outcomes: list[tuple[int, str | None, list[Acl]]] = [
        (*refused, []) if refused is not None else (errors.NONE, None, [])
    ] * len(filters)
    if refused is None:
        valid: list[tuple[int, AclFilter]] = []
        for index, wire in enumerate(filters):
            try:
                selector = AclFilter.from_wire(wire)
                selector.check()
            except AclError as exc:
                outcomes[index] = (errors.INVALID_REQUEST, str(exc), [])
                continue
            valid.append((index, selector))
        if valid:
            try:
                removed = await ctx.services.authorizer.source.change([], [f for _, f in valid])
            except Exception as exc:
                failure = store_failure(exc)
                for index, _ in valid:
                    outcomes[index] = (*failure, [])
            else:
                for (index, _), gone in zip(valid, removed, strict=True):
                    outcomes[index] = (errors.NONE, None, gone)
                    for acl in gone:
                        log.info("ACL removed by %s: %s", ctx.principal, acl.describe())
    results = tuple(
        ctx.build(
            "DeleteAclsFilterResult",
            error_code=code,
            error_message=message,
            matching_acls=tuple(_matching(ctx, acl) for acl in gone),
        )
        for code, message, gone in outcomes
    )
    return ctx.build("DeleteAclsResponse", throttle_time=0, filter_results=results)


def _matching(ctx: RequestContext, acl: Acl) -> Any:
    return ctx.build(
        "DeleteAclsMatchingAcl",
        error_code=errors.NONE,
        error_message=None,
        resource_type=acl.resource_type,
        resource_name=acl.name,
        pattern_type=acl.pattern,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission,
    )
