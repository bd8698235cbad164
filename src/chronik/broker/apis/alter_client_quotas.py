"""AlterClientQuotas (API key 49), versions 0-1.

Each entry names an entity (`user`, `client-id` or both; a null name is the default) and
sets or removes quota keys, validated as Kafka validates them: an empty entity, a
duplicate or unknown entity type, an empty name, an unknown key, a value not above 0 or
a fraction for a byte rate are INVALID_REQUEST with Kafka's message, and none of that
entry's changes is made (`ip` entities are refused: connection-rate quotas are not
served). With validate_only nothing is stored. The entries that pass are stored together
(the data dir's quotas.json, or ZooKeeper's /config in a cluster, with change notices)
and apply to the next request on every broker. It needs ALTER_CONFIGS on the Cluster,
else every entry is CLUSTER_AUTHORIZATION_FAILED, as Kafka's KafkaApis. Each change is
logged with who made it.
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.security.quota_configs import QuotaError, entity_of, entity_path, quota_value

log = logging.getLogger("chronik.security")

API_KEY = 49
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed_on_cluster(Operation.ALTER_CONFIGS):
        code, message = errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return _response(ctx, [(e.entity, code, message) for e in request.entries])
    outcomes: list[tuple[Any, int, str | None]] = []
    changes: dict[str, dict[str, str | None]] = {}
    stored: list[int] = []  # the outcomes whose changes are written
    for entry in request.entries:
        try:
            path = entity_path(entity_of((e.entity_type, e.entity_name) for e in entry.entity))
            ops = {
                op.key: None if op.remove else quota_value(op.key, op.value) for op in entry.ops
            }
        except QuotaError as exc:
            outcomes.append((entry.entity, exc.code, str(exc)))
            continue
        changes.setdefault(path, {}).update(ops)
        stored.append(len(outcomes))
        outcomes.append((entry.entity, errors.NONE, None))
    if changes and not request.validate_only:
        source = ctx.services.quotas.source
        try:
            await source.alter(changes)
        except Exception as exc:  # a full disk, ZooKeeper away: each entry hears of it
            code = getattr(exc, "code", None)
            if code is None and not isinstance(exc, OSError):
                raise
            log.warning("cannot store client quotas: %s", exc)
            for i in stored:
                outcomes[i] = (
                    outcomes[i][0],
                    code or errors.KAFKA_STORAGE_ERROR,
                    f"Quotas not stored: {exc}",
                )
        else:
            for path, ops in changes.items():
                log.info("%s altered client quotas of %s: %s", ctx.principal, path,
                         ", ".join(f"{k}={'(removed)' if v is None else v}"
                                   for k, v in ops.items()))
    return _response(ctx, outcomes)


def _response(ctx: RequestContext, outcomes: list[tuple[Any, int, str | None]]) -> Any:
    entries = tuple(
        ctx.build(
            "EntryData",
            error_code=code,
            error_message=message,
            entity=tuple(
                ctx.build("EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entity
            ),
        )
        for entity, code, message in outcomes
    )
    return ctx.build("AlterClientQuotasResponse", throttle_time=0, entries=entries)
