"""SaslHandshake (API key 17), versions 0-1.

Names the mechanism of a connection on a SASL listener. After v0 the tokens follow as
bare frames; after v1 in SaslAuthenticate requests. On an authenticated connection whose
session has a lifetime (connections.max.reauth.ms) it starts a re-authentication (the
connection decides that when it reads the request; the mechanism must be the same).
Elsewhere (a PLAINTEXT or SSL listener, or an authenticated connection otherwise) it is
ILLEGAL_SASL_STATE, as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.sasl import State

API_KEY = 17
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Any) -> Any:
    session = ctx.sasl
    if session is None or session.state is not State.HANDSHAKE:
        return ctx.build(
            "SaslHandshakeResponse", error_code=errors.ILLEGAL_SASL_STATE, mechanisms=()
        )
    ok = session.handshake(request.mechanism, ctx.api_version)
    return ctx.build(
        "SaslHandshakeResponse",
        error_code=errors.NONE if ok else errors.UNSUPPORTED_SASL_MECHANISM,
        mechanisms=tuple(session.enabled),
    )
