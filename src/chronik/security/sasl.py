"""SASL on one connection, as Kafka's SaslServerAuthenticator runs it.

SaslHandshake names a mechanism; then the mechanism's tokens travel inside
SaslAuthenticate requests (handshake v1) or, after a v0 handshake, as bare frames: a
4-byte big-endian length and the token, answered the same way, with no Kafka header.
Until the exchange completes, a connection may send only ApiVersions, SaslHandshake and
SaslAuthenticate.

Mechanisms: PLAIN (RFC 4616: "authzid NUL user NUL password", checked against the SCRAM
credential store) and SCRAM-SHA-256 / SCRAM-SHA-512.

Re-authentication (KIP-368): with a session lifetime for the mechanism
(`connections.max.reauth.ms`), a completed authentication expires that long after it
completed. Before then (or after), a SaslHandshake on the connection starts a new
exchange with the same mechanism, which must end with the same user; it starts a new
lifetime. The credentials are read again, so a deleted user or a changed password
takes effect then.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Mapping

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
# As Kafka's KafkaChannel: a connection re-authenticates at most once a second; a
# SaslHandshake sooner than that is answered as on any authenticated connection.
MIN_REAUTH_INTERVAL_SECONDS = 1.0


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
        self,
        enabled: tuple[str, ...],
        store: CredentialStore | SharedCredentials,
        lifetimes: Mapping[str, int] | None = None,
    ) -> None:
        self.enabled = enabled
        self.store = store
        # Session lifetime in ms by mechanism (connections.max.reauth.ms); 0: none.
        self.lifetimes = dict(lifetimes or {})
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        # A v0 handshake: the tokens come as bare frames.
        self.raw = False
        # The authenticated user; during a re-authentication, still the previous one.
        self.user: str | None = None
        # Whether the exchange under way (or the last one) is a re-authentication.
        self.reauthentication = False
        # The current session's lifetime, as SaslAuthenticate tells the client, and
        # when it ends (time.monotonic()); None: it does not.
        self.lifetime_ms = 0
        self.expires_at: float | None = None
        self._reauth_started: float | None = None
        # Why a re-authentication that named another mechanism fails at its first token.
        self._refusal: str | None = None
        self._server: PlainServer | ScramStepper | None = None

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def authenticated(self) -> bool:
        """Whether the connection has a user: authenticated, perhaps re-authenticating."""
        return self.user is not None and self.state is not State.FAILED

    def expired(self, now: float | None = None) -> bool:
        """Whether the session's lifetime has ended (never without one)."""
        if self.expires_at is None:
            return False
        return (time.monotonic() if now is None else now) > self.expires_at

    def begin_reauthentication(self, now: float | None = None) -> bool:
        """A SaslHandshake arrived on an authenticated connection: whether it starts a
        re-authentication. It does, as in Kafka, only when the session has a lifetime
        and the previous re-authentication started at least a second ago."""
        if self.state is not State.COMPLETE or self.expires_at is None:
            return False
        now = time.monotonic() if now is None else now
        last = self._reauth_started
        if last is not None and now - last < MIN_REAUTH_INTERVAL_SECONDS:
            return False
        self._reauth_started = now
        self.reauthentication = True
        self._refusal = None
        self._server = None
        self.state = State.HANDSHAKE
        return True

    def handshake(self, mechanism: str, version: int) -> bool:
        """Whether ``mechanism`` is enabled; if it is, authentication starts."""
        if mechanism not in self.enabled:
            if self.reauthentication:
                self.state = State.FAILED
            return False
        self.raw = version == 0
        self.state = State.AUTHENTICATE
        if self.reauthentication and mechanism != self.mechanism:
            # Kafka's REAUTH_BAD_MECHANISM: the handshake succeeds, the exchange fails.
            self._refusal = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.mechanism}'"
            )
            return True
        self.mechanism = mechanism
        self._server = (
            PlainServer(self.store) if mechanism == PLAIN else ScramStepper(mechanism, self.store)
        )
        return True

    async def authenticate(self, token: bytes) -> bytes:
        """One token from the client; the server's answer. Raises AuthenticationFailed."""
        if self._refusal is not None:
            self.state = State.FAILED
            raise AuthenticationFailed(self._refusal)
        if self.state is not State.AUTHENTICATE or self._server is None:
            raise AuthenticationFailed(f"unexpected SASL token in state {self.state.value}")
        try:
            answer = await self._server.step(token)
        except AuthenticationFailed as exc:
            self.state = State.FAILED
            if self.reauthentication:
                # Kafka's wording names which of the two failed.
                message = str(exc).replace("during authentication", "during re-authentication")
                raise AuthenticationFailed(message) from None
            raise
        if self._server.done:
            user = self._server.user
            if self.reauthentication and user != self.user:
                self.state = State.FAILED
                raise AuthenticationFailed(
                    "Cannot change principals during re-authentication from "
                    f"User.{self.user}: User.{user}"
                )
            self.user = user
            self.state = State.COMPLETE
            self._server = None
            self.lifetime_ms = self.lifetimes.get(self.mechanism or "", 0)
            self.expires_at = (
                time.monotonic() + self.lifetime_ms / 1000 if self.lifetime_ms > 0 else None
            )
        return answer
