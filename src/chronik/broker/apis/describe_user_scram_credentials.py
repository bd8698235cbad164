"""DescribeUserScramCredentials (API key 50), version 0.

Each user's SCRAM mechanisms and iteration counts (never a salt or key). A named user
without credentials is RESOURCE_NOT_FOUND, a name given twice DUPLICATE_RESOURCE; no
names (null or empty) lists every user. It needs DESCRIBE on the Cluster: without it
the response and each named user are CLUSTER_AUTHORIZATION_FAILED, as Kafka's KafkaApis.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.security.scram import MECHANISM_IDS

API_KEY = 50
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        code, message = errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return ctx.build(
            "DescribeUserScramCredentialsResponse",
            throttle_time=0,
            error_code=code,
            error_message=message,
            results=tuple(_result(ctx, u.name, code, message) for u in request.users or ()),
        )
    store = ctx.services.security.store
    if not request.users:  # null or empty: every user, as Kafka
        names = sorted(store.users())
        counts: Counter[str] = Counter(names)
    else:
        names = [u.name for u in request.users]
        counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            message = f"Cannot describe SCRAM credentials for the same user twice: {name}"
            results.append(_result(ctx, name, errors.DUPLICATE_RESOURCE, message))
            continue
        creds = store.mechanisms(name)
        if not creds:
            message = f"Attempt to describe a user credential that does not exist: {name}"
            results.append(_result(ctx, name, errors.RESOURCE_NOT_FOUND, message))
            continue
        infos = tuple(
            ctx.build("CredentialInfo", mechanism=MECHANISM_IDS[m], iterations=c.iterations)
            for m, c in sorted(creds.items())
        )
        results.append(_result(ctx, name, errors.NONE, None, infos))
    return ctx.build(
        "DescribeUserScramCredentialsResponse",
        throttle_time=0,
        error_code=errors.NONE,
        error_message=None,
        results=tuple(results),
    )


def _result(
    ctx: RequestContext, user: str, code: int, message: str | None, infos: tuple[Any, ...] = ()
) -> Any:
    return ctx.build(
        "DescribeUserScramCredentialsResult",
        user=user,
        error_code=code,
        error_message=message,
        credential_infos=infos,
    )
