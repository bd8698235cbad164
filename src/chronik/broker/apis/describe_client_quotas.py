"""DescribeClientQuotas (API key 48), versions 0-1.

The quota entities a filter matches, with their values, as Kafka's ZooKeeper-mode broker
answers (chronik.security.quota_configs.describe): components of entity type `user` or
`client-id` (or `ip`, of which none are kept), each EXACT (a name, or null for the
default), DEFAULT or SPECIFIED (any name or the default); with `strict`, only entities
with no other parts. A bad filter is INVALID_REQUEST (a custom entity type
UNSUPPORTED_VERSION) with Kafka's message and no entries. It needs DESCRIBE_CONFIGS on the
Cluster, else CLUSTER_AUTHORIZATION_FAILED, as Kafka's KafkaApis.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.security.quota_configs import QuotaError, describe

API_KEY = 48
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
        return _error(ctx, errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    source = ctx.services.quotas.source
    quotas = source.quotas if source is not None else {}
    try:
        found = describe(
            quotas,
            [(c.entity_type, c.match_type, c.match) for c in request.components],
            request.strict,
        )
    except QuotaError as exc:
        return _error(ctx, exc.code, str(exc))
    entries = tuple(
        ctx.build(
            "EntryData",
            entity=tuple(
                ctx.build("EntityData", entity_type=t, entity_name=n) for t, n in entity
            ),
            values=tuple(
                ctx.build("ValueData", key=k, value=float(v)) for k, v in sorted(values.items())
            ),
        )
        for entity, values in found
    )
    return ctx.build(
        "DescribeClientQuotasResponse",
        throttle_time=0,
        error_code=errors.NONE,
        error_message=None,
        entries=entries,
    )


def _error(ctx: RequestContext, code: int, message: str) -> Any:
    return ctx.build(
        "DescribeClientQuotasResponse",
        throttle_time=0,
        error_code=code,
        error_message=message,
        entries=None,
    )
