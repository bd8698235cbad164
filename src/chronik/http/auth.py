"""Who sends an HTTP request: with an authorizer or a SASL listener on the broker, every
request needs HTTP Basic credentials, checked against the SCRAM credential store as SASL
PLAIN checks them (principal User:NAME); then the ACLs decide, as for the Kafka protocol.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time

from chronik.http.server import HttpError, Request
from chronik.security.acl_model import Operation, ResourceType
from chronik.security.authorizer import Authorizer
from chronik.security.broker_security import BrokerSecurity
from chronik.security.sasl import AuthenticationFailed, PlainServer

AUTH_CACHE_SECONDS = 60.0
AUTH_CACHE_SIZE = 1024


class BasicAuth:
    def __init__(self, security: BrokerSecurity, authorizer: Authorizer) -> None:
        self.security = security
        self.authorizer = authorizer
        self._auth_cache: dict[tuple[str, bytes], tuple[float, str]] = {}

    @property
    def secured(self) -> bool:
        """Whether requests need credentials: the broker has an authorizer or SASL."""
        return self.authorizer.enabled or any(s.sasl for s in self.security.listeners)

    async def principal(self, request: Request) -> str | None:
        """The request's principal (User:NAME), None when no credentials are needed;
        raises 401 when they are needed and missing or wrong."""
        if not self.secured:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        user = password = None
        if scheme.lower() == "basic":
            try:
                user, sep, password = (
                    base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
                )
                if not sep:
                    user = None
            except (binascii.Error, UnicodeDecodeError):
                user = None
        if not user or not password:
            err = HttpError(401, "unauthorized", "HTTP Basic credentials required")
            err.headers["WWW-Authenticate"] = 'Basic realm="chronik", charset="UTF-8"'
            raise err
        return await self.check(user, password, request.peer, challenge=True)

    async def check(self, user: str, password: str, peer: str, challenge: bool = False) -> str:
        """The principal User:NAME of a user and password checked against the SCRAM
        credential store (a failure counted and slowed down as a failed SASL login);
        raises 401 for wrong ones."""
        store = self.security.store
        # A password checked recently for the same stored credential is not run through
        # PBKDF2 again; a changed or deleted credential misses the cache.
        fingerprint = repr(sorted(store.mechanisms(user).items()))
        digest = hashlib.sha256(password.encode()).digest()
        cached = self._auth_cache.get((user, digest))
        now = time.monotonic()
        if cached is not None and cached[0] > now and cached[1] == fingerprint:
            return f"User:{user}"
        try:
            await PlainServer(store).step(b"\0" + user.encode() + b"\0" + password.encode())
        except AuthenticationFailed:
            await self.security.http_authentication_failed(peer, user)
            err = HttpError(401, "unauthorized", "invalid credentials")
            if challenge:
                err.headers["WWW-Authenticate"] = 'Basic realm="chronik", charset="UTF-8"'
            raise err from None
        if len(self._auth_cache) >= AUTH_CACHE_SIZE:
            self._auth_cache.clear()
        self._auth_cache[(user, digest)] = (now + AUTH_CACHE_SECONDS, fingerprint)
        return f"User:{user}"

    def authorize(
        self, request: Request, principal: str | None, operation: Operation, topic: str
    ) -> None:
        if principal is None:
            return
        if not self.authorizer.authorize(
            principal, request.peer, operation, ResourceType.TOPIC, topic
        ):
            raise HttpError(
                403,
                "forbidden",
                f"{principal} may not {operation.name} topic {topic!r}",
            )
