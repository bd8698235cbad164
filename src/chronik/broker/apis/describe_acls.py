"""DescribeAcls (API key 29), versions 1-3.

Needs DESCRIBE on the cluster. The bindings the filter matches, grouped by resource
pattern as Kafka groups them. A filter with an UNKNOWN field is INVALID_REQUEST; without
an authorizer the answer is SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.acl_changes import unavailable
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Acl, AclError, AclFilter, Operation

API_KEY = 29
VERSIONS = (1, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    refused = unavailable(ctx, Operation.DESCRIBE)
    if refused is not None:
        return _response(ctx, *refused)
    try:
        selector = AclFilter.from_wire(request)
        selector.check()
    except AclError as exc:
        return _response(ctx, errors.INVALID_REQUEST, str(exc))
    source = ctx.services.authorizer.source
    grouped: dict[tuple[int, str, int], list[Acl]] = {}
    for acl in source.acls if source is not None else ():
        if selector.matches(acl):
            grouped.setdefault((acl.resource_type, acl.name, acl.pattern), []).append(acl)
    resources = tuple(
        ctx.build(
            "DescribeAclsResource",
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                ctx.build(
                    "AclDescription",
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission,
                )
                for acl in acls
            ),
        )
        for (resource_type, name, pattern), acls in grouped.items()
    )
    return _response(ctx, errors.NONE, None, resources)


def _response(
    ctx: RequestContext, code: int, message: str | None, resources: tuple[Any, ...] = ()
) -> Any:
    return ctx.build(
        "DescribeAclsResponse",
        throttle_time=0,
        error_code=code,
        error_message=message,
        resources=resources,
    )
