"""CreateAcls (API key 30), versions 1-3.

Needs ALTER on the cluster. Each creation is checked as Kafka checks it (INVALID_REQUEST
with the reason); the valid ones are stored in one write and apply to the next request.
Without an authorizer every creation is SECURITY_DISABLED.
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.acl_changes import store_failure, unavailable
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Acl, AclError, Operation

log = logging.getLogger("chronik.security")

API_KEY = 30
VERSIONS = (1, 3)


async def handle(ctx: RequestContext, request: Any) -> Any:
    creations = request.creations
    refused = unavailable(ctx, Operation.ALTER)
    outcomes: list[tuple[int, str | None]] = [refused] * len(creations)
    if refused is None:
        made: list[tuple[int, Acl]] = []
        for index, creation in enumerate(creations):
            try:
                acl = Acl.from_wire(creation)
                acl.check()
            except AclError as exc:
                outcomes[index] = (errors.INVALID_REQUEST, str(exc))
                continue
            outcomes[index] = (errors.NONE, None)
            made.append((index, acl))
        if made:
            try:
                await ctx.services.authorizer.source.change([acl for _, acl in made], [])
            except Exception as exc:
                failure = store_failure(exc)
                for index, _ in made:
                    outcomes[index] = failure
            else:
                for _, acl in made:
                    log.info("ACL added by %s: %s", ctx.principal, acl.describe())
    results = tuple(
        ctx.build("AclCreationResult", error_code=code, error_message=message)
        for code, message in outcomes
    )
    return ctx.build("CreateAclsResponse", throttle_time=0, results=results)
