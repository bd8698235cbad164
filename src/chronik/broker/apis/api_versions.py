"""ApiVersions (API key 18), versions 0-4."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from chronik.broker.context import RequestContext

if TYPE_CHECKING:
    from chronik.broker.services import Services

API_KEY = 18
VERSIONS = (0, 4)
UNSUPPORTED_VERSION = 35


def _ranges() -> list[tuple[int, int, int]]:
    from chronik.broker.apis import HANDLERS

    return sorted(
        (key, m.VERSIONS[0], m.VERSIONS[1])
        for key, m in HANDLERS.items()
        if getattr(m, "ADVERTISED", True)
    )


def unsupported_version_body(broker: Services) -> bytes:
    """A v0 response with UNSUPPORTED_VERSION, readable by a client at any version."""
    ranges = _ranges()
    parts = [struct.pack(">hi", UNSUPPORTED_VERSION, len(ranges))]
    parts.extend(struct.pack(">hhh", *r) for r in ranges)
    return b"".join(parts)


async def handle(ctx: RequestContext, request: Any) -> Any:
    keys = tuple(
        ctx.build("ApiVersion", api_key=key, min_version=low, max_version=high)
        for key, low, high in _ranges()
    )
    return ctx.build(
        "ApiVersionsResponse",
        error_code=0,
        api_keys=keys,
        throttle_time=0,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
