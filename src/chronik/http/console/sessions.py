"""The console's login sessions: server-side, named by a random cookie
(``chronik_console``, HttpOnly, SameSite=Strict, Path=/console/, Secure on TLS), each with
its own CSRF token and its own Kafka connections (chronik.http.console.kafka).

A session ends on logout or after ``timeout`` seconds without a request; at most
``max_sessions`` live at once, the least recently used one closed to make room (a new
login never waits on old ones, and memory stays bounded). The password a secured
session authenticates its Kafka connections with is kept in memory only, never in a
response or a log line (``Credentials`` leaves it out of its repr); it also makes the
HTTP Basic credentials of a request the console forwards to another broker's HTTP
listener (an aggregate whose partition that broker leads), server to server.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from chronik.http.console.kafka import KafkaSession
from chronik.security.sasl_client import Credentials

COOKIE = "chronik_console"
TOKEN_BYTES = 32
# A cookie value longer than this is not a session id: not looked up.
MAX_COOKIE_CHARS = 128


@dataclass(eq=False)
class Session:
    id: str = field(repr=False)
    csrf: str = field(repr=False)
    principal: str | None
    kafka: KafkaSession = field(repr=False)
    last_used: float = 0.0
    # (topic) -> (time, summed end offsets): the previous sample of messages per second.
    rates: dict[str, tuple[float, int]] = field(default_factory=dict, repr=False)
    # The user's own, on a secured broker (None on an open one).
    credentials: Credentials | None = field(default=None, repr=False)

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


class Sessions:
    def __init__(
        self,
        max_sessions: int,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_sessions = max(1, max_sessions)
        self.timeout = timeout
        self._clock = clock
        self._live: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def create(
        self, principal: str | None, kafka: KafkaSession, credentials: Credentials | None = None
    ) -> Session:
        self.expire()
        while len(self._live) >= self.max_sessions:
            _, oldest = self._live.popitem(last=False)
            oldest.kafka.close()
        session = Session(
            secrets.token_urlsafe(TOKEN_BYTES), secrets.token_urlsafe(TOKEN_BYTES), principal,
            kafka, self._clock(), credentials=credentials,
        )
        self._live[session.id] = session
        return session

    def get(self, cookie_header: str | None) -> Session | None:
        """The live session the request's Cookie header names, touched; else None."""
        sid = cookie_value(cookie_header, COOKIE)
        if sid is None or len(sid) > MAX_COOKIE_CHARS:
            return None
        session = self._live.get(sid)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_used > self.timeout:
            self.end(session)
            return None
        session.last_used = now
        self._live.move_to_end(sid)
        return session

    def end(self, session: Session) -> None:
        self._live.pop(session.id, None)
        session.kafka.close()

    def expire(self) -> None:
        now = self._clock()
        for session in [s for s in self._live.values() if now - s.last_used > self.timeout]:
            self.end(session)

    def close(self) -> None:
        for session in list(self._live.values()):
            self.end(session)


def cookie_value(header: str | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value.strip()
    return None


def set_cookie(session: Session, secure: bool) -> str:
    value = f"{COOKIE}={session.id}; HttpOnly; SameSite=Strict; Path=/console/"
    return value + ("; Secure" if secure else "")


def clear_cookie(secure: bool) -> str:
    value = f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/console/; Max-Age=0"
    return value + ("; Secure" if secure else "")
