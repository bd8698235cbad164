"""AlterUserScramCredentials (API key 51), version 0.

Upsertions carry a salt, an iteration count and the salted password (the client salts
it; the broker keeps only the stored and server keys); deletions a user and mechanism.
As Kafka: a user named twice for one mechanism is DUPLICATE_RESOURCE and none of its
changes is made, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside
4096-16384 UNACCEPTABLE_CREDENTIAL, deleting what is not there RESOURCE_NOT_FOUND.
It needs ALTER on the Cluster: without it each user named is CLUSTER_AUTHORIZATION_FAILED
and nothing changes, as Kafka's KafkaApis.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    from_salted_password,
)

log = logging.getLogger("chronik.security")

API_KEY = 51
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed_on_cluster(Operation.ALTER):
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        results = tuple(
            ctx.build(
                "AlterUserScramCredentialsResult",
                user=name,
                error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Cluster authorization failed.",
            )
            for name in users
        )
        return ctx.build("AlterUserScramCredentialsResponse", throttle_time=0, results=results)
    store = ctx.services.security.store
    changes = [(d.name, d.mechanism, None) for d in request.deletions] + [
        (u.name, u.mechanism, u) for u in request.upsertions
    ]
    twice = Counter((name, mechanism) for name, mechanism, _ in changes)
    failed: dict[str, tuple[int, str]] = {}
    for name, mechanism, upsert in changes:
        if name in failed:
            continue
        if not name:
            failed[name] = (errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif twice[(name, mechanism)] > 1:
            failed[name] = (
                errors.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        elif mechanism not in MECHANISM_NAMES:
            failed[name] = (errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif upsert is not None and not MIN_ITERATIONS <= upsert.iterations <= MAX_ITERATIONS:
            failed[name] = (
                errors.UNACCEPTABLE_CREDENTIAL,
                f"Iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}",
            )
        elif upsert is None and store.lookup(name, MECHANISM_NAMES[mechanism]) is None:
            failed[name] = (
                errors.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
    made: list[tuple[str, str, ScramCredential | None]] = []
    for name, mechanism, upsert in changes:
        if name in failed:
            continue
        mech = MECHANISM_NAMES[mechanism]
        credential = None
        if upsert is not None:
            credential = from_salted_password(
                mech, bytes(upsert.salted_password), bytes(upsert.salt), upsert.iterations
            )
        made.append((name, mech, credential))
    try:
        await _write(ctx, made)
    except Exception as exc:  # a full disk, ZooKeeper away: each user hears of it
        code = getattr(exc, "code", None)
        if code is None and not isinstance(exc, OSError):
            raise
        log.warning("cannot store SCRAM credentials: %s", exc)
        for name, _, _ in made:
            failed[name] = (code or errors.KAFKA_STORAGE_ERROR, f"Credentials not stored: {exc}")
    results = tuple(
        ctx.build(
            "AlterUserScramCredentialsResult",
            user=name,
            error_code=failed.get(name, (errors.NONE, None))[0],
            error_message=failed.get(name, (errors.NONE, None))[1],
        )
        for name in dict.fromkeys(n for n, _, _ in changes)
    )
    return ctx.build("AlterUserScramCredentialsResponse", throttle_time=0, results=results)


async def _write(ctx: RequestContext, made: list[tuple[str, str, ScramCredential | None]]) -> None:
    cluster = ctx.services.cluster
    if cluster is not None:
        # A cluster keeps them in ZooKeeper (/config/users), for every broker.
        await cluster.alter_user_credentials(
            [(n, m, c.to_kafka() if c is not None else None) for n, m, c in made]
        )
        return
    ctx.services.security.store.apply(made)
