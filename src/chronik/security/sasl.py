"""SASL on one connection, as Kafka's SaslServerAuthenticator runs it.

SaslHandshake names a mechanism; then the mechanism's tokens travel inside
SaslAuthenticate requests (handshake v1) or, after a v0 handshake, as bare frames: a
4-byte big-endian length and the token, answered the same way, with no Kafka header.
Until the exchange completes, a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate.

Mechanisms: PLAIN (RFC 4616: "authzid NUL user NUL password", checked against the SCRAM
credential store) and SCRAM-SHA-256 / SCRAM-SHA-512.
"""

from __future__ import annotations

import asyncio
import enum

from chronik.security.credentials import CredentialStore, SharedCredentials
from chronik.security.scram import (
    MECHANISMS,
    ScramError,
    ScramServer,
    check_password,
    decoy,
)

PLAIN = "PLAIN"
SUPPORTED = (PLAIN, *MECHANISMS)
PLAIN_DECOY = "SCRAM-SHA-512"


class AuthenticationFailed(Exception):
    """Authentication failed; the message names no secret and may go to the client."""


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


def invalid_credentials(mechanism: str) -> AuthenticationFailed:
    # Kafka's wording, the same for a wrong password and an unknown user.
    return AuthenticationFailed(
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


class PlainServer:
    def __init__(self, store: CredentialStore | SharedCredentials) -> None:
        self.store = store
        self.user: str | None = None
        self.done = False

    async def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user_bytes, password = parts
        try:
            user = user_bytes.decode("utf-8")
            authz = authzid.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user or not password:
            raise AuthenticationFailed("Authentication failed: username or password not specified")
        if authz and authz != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        # Any of the user's SCRAM credentials can check the password; an unknown user's
        # is checked against a decoy, so both take the same time. PBKDF2 runs in a
        # thread: it takes milliseconds and releases the GIL.
        credentials = self.store.mechanisms(user)
        known = bool(credentials)
        mechanism, credential = next(iter(credentials.items()), (PLAIN_DECOY, None))
        if credential is None:
            credential = decoy(mechanism, user)
        matched = await asyncio.to_thread(check_password, mechanism, credential, password)
        if not (known and matched):
            raise invalid_credentials(PLAIN)
        self.user = user
        self.done = True
        return b""


class ScramStepper:
    """The two rounds of a SCRAM exchange as steps."""

    def __init__(self, mechanism: str, store: CredentialStore | SharedCredentials) -> None:
        self.server = ScramServer(mechanism, lambda user: store.lookup(user, mechanism))
        self.mechanism = mechanism
        self.round = 0
        self.user: str | None = None
        self.done = False

    async def step(self, token: bytes) -> bytes:
        self.round += 1
        try:
            if self.round == 1:
                return self.server.first(token)
            if self.round == 2:
                answer = self.server.final(token)
                self.user = self.server.user
                self.done = True
                return answer
        except ScramError as exc:
            raise AuthenticationFailed(str(exc)) from None
        raise AuthenticationFailed("unexpected SCRAM message after the exchange")


class SaslSession:
    """The authentication state of one connection on a SASL listener."""

    def __init__(
        self, enabled: tuple[str, ...], store: CredentialStore | SharedCredentials
    ) -> None:
        self.enabled = enabled
        self.store = store
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        # A v0 handshake: the tokens come as bare frames.
        self.raw = False
        self.user: str | None = None
        self._server: PlainServer | ScramStepper | None = None

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def handshake(self, mechanism: str, version: int) -> bool:
        """Whether ``mechanism`` is enabled; if it is, authentication starts."""
        if mechanism not in self.enabled:
            return False
        self.mechanism = mechanism
        self.raw = version == 0
        self._server = (
            PlainServer(self.store) if mechanism == PLAIN else ScramStepper(mechanism, self.store)
        )
        self.state = State.AUTHENTICATE
        return True

    async def authenticate(self, token: bytes) -> bytes:
        """One token from the client; the server's answer. Raises AuthenticationFailed."""
        if self.state is not State.AUTHENTICATE or self._server is None:
            raise AuthenticationFailed(f"unexpected SASL token in state {self.state.value}")
        try:
            answer = await self._server.step(token)
        except AuthenticationFailed:
            self.state = State.FAILED
            raise
        if self._server.done:
            self.user = self._server.user
            self.state = State.COMPLETE
        return answer
