"""A request about a key whose partition another broker leads, passed to that broker's
HTTP listener and its answer passed back, so that neither a client of the event store's
API nor a console user needs to know which broker leads what.

Where the leader listens: the URL it registered with its ZooKeeper registration
(``"http_api"`` in /brokers/ids/<id>, chronik.cluster.znodes). The forwarded request
carries ``chronik-forwarded: 1``: a broker that receives one for a partition it does not
lead answers it itself (421 naming the leader it knows) and never forwards it again, so
a request crosses at most one hop, whatever two brokers believe about a leadership on
the move. An https:// URL is reached with the broker's own trust store (as the schema
registry's forward and the inter-broker client do), the host name checked.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from chronik.http.forward import ForwardFailed, forward
from chronik.http.server import HttpError, Request, Response
from chronik.security.tls import TlsSettings, client_context

FORWARDED = "chronik-forwarded"
# What a request about a key carries to the leader: credentials, the body's type and
# the expected version (If-Match / If-None-Match).
SENT_HEADERS = ("authorization", "content-type", "accept", "if-match", "if-none-match")


def led_by(exc: HttpError) -> int | None:
    """The broker an event-store answer names as the key's partition's leader (its 421
    ``not_leader``), else None."""
    if exc.status != 421 or exc.body.get("error") != "not_leader":
        return None
    leader = exc.body.get("leader")
    return leader if isinstance(leader, int) else None


class LeaderUnreachable(Exception):
    """The leader serves no HTTP listener, or did not answer (the message says which)."""


class LeaderForward:
    def __init__(
        self,
        url_of: Callable[[int], str | None],
        tls_settings: TlsSettings,
        timeout: float,
    ) -> None:
        self.url_of = url_of
        self.tls_settings = tls_settings
        self.timeout = timeout
        self._tls: ssl.SSLContext | None = None

    def serves(self, leader: int) -> bool:
        """Whether ``leader`` registered an HTTP listener to forward to."""
        return self.url_of(leader) is not None

    async def send(self, request: Request, leader: int) -> Response:
        """The leader's (status, body bytes, headers) for ``request``; the body's
        Content-Type among the headers. Raises LeaderUnreachable."""
        url = self.url_of(leader)
        if url is None:
            raise LeaderUnreachable(f"broker {leader} serves no HTTP listener (http.listen)")
        parts = urlsplit(url)
        tls = None
        if parts.scheme == "https":
            if self._tls is None:
                try:
                    self._tls = client_context(self.tls_settings)
                except (ValueError, OSError) as exc:
                    raise LeaderUnreachable(f"no TLS context for {url}: {exc}") from None
            tls = self._tls
        try:
            status, body, headers = await forward(
                request,
                parts.hostname or "127.0.0.1",
                parts.port or (443 if tls else 80),
                self.timeout,
                tls,
                {FORWARDED: "1"},
                SENT_HEADERS,
            )
        except ForwardFailed as exc:
            raise LeaderUnreachable(f"broker {leader} did not answer at {url}: {exc}") from None
        out = {"Content-Type": headers.get("content-type", "application/json")}
        if "etag" in headers:  # the key's version count, as the leader answers it
            out["ETag"] = headers["etag"]
        return status, body, out
