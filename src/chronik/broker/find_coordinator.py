"""FindCoordinator (API key 10), versions 0-6; v4+ carries a batch of keys.

A single node coordinates every group and transactional id: the answer is always us.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors

API_KEY = 10
VERSIONS = (0, 6)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        code, message = errors.INVALID_REQUEST, f"unknown key type {key_type}"
    else:
        code, message = errors.NONE, None
    node = dict(
        node_id=broker.node_id if code == errors.NONE else -1,
        host=broker.host if code == errors.NONE else "",
        port=broker.port if code == errors.NONE else -1,
        error_code=code,
        error_message=message,
    )
    if ctx.api_version >= 4:
        coordinators = tuple(
            ctx.build("Coordinator", key=key, **node) for key in request.coordinator_keys
        )
        return ctx.build("FindCoordinatorResponse", throttle_time=0, coordinators=coordinators)
    return ctx.build("FindCoordinatorResponse", throttle_time=0, **node)
