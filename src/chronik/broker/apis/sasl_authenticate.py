"""SaslAuthenticate (API key 36), versions 0-2.

Carries one SASL token each way after a v1 SaslHandshake. A failed exchange answers
SASL_AUTHENTICATION_FAILED with Kafka's message, after the failed-authentication delay,
and the connection closes once the answer is written. The answer that completes an
exchange carries the session's lifetime (v1+: session_lifetime_ms, from
connections.max.reauth.ms; 0 without one), before which the client re-authenticates.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.sasl import AuthenticationFailed, State

API_KEY = 36
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    session = ctx.sasl
    if session is None or session.state is not State.AUTHENTICATE or session.raw:
        return _answer(ctx, errors.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request")
    try:
        token = await session.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        await ctx.services.security.authentication_failed(ctx.client_host, session, str(exc))
        return _answer(ctx, errors.SASL_AUTHENTICATION_FAILED, str(exc))
    lifetime = 0
    if session.complete:
        ctx.services.security.authenticated(session)
        lifetime = session.lifetime_ms
    return _answer(ctx, errors.NONE, None, token, lifetime)


def _answer(
    ctx: RequestContext, code: int, message: str | None, token: bytes = b"", lifetime: int = 0
) -> Any:
    return ctx.build(
        "SaslAuthenticateResponse",
        error_code=code,
        error_message=message,
        auth_bytes=token,
        session_lifetime=lifetime,
    )
