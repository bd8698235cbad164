"""The HTTP API connection behind a store's reads and appends: one per thread, so that a
store may be shared between threads."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

from chronik.eventstore.encoding import key_bytes
from chronik.eventstore.errors import EventStoreError, raise_for

# Reconnect before reusing an HTTP connection idle this long (the broker closes idle ones
# after http.request.timeout.ms, 30 s by default).
IDLE_RECONNECT_S = 20.0


class HttpTransport:
    def __init__(
        self,
        http_url: str,
        auth: tuple[str, str] | None = None,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        url = urlsplit(http_url if "://" in http_url else "http://" + http_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"http_url wants http[s]://HOST:PORT, got {http_url!r}")
        self.http_url = http_url
        self._scheme = url.scheme
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._timeout = timeout
        self._ssl = ssl_context
        self._auth = None
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._auth = f"Basic {token}"
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        used = getattr(self._local, "used", 0.0)
        if conn is not None and time.monotonic() - used > IDLE_RECONNECT_S:
            conn.close()
            conn = None
        if conn is None:
            if self._scheme == "https":
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        headers: dict[str, str] | None = None,
        retry: bool = True,
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON body, headers). ``retry``: resend once on a connection the broker
        closed (only for requests safe to repeat)."""
        sent = {"Accept": "application/json", **(headers or {})}
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            sent["Content-Type"] = "application/json"
        if self._auth:
            sent["Authorization"] = self._auth
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, self._prefix + path, body=payload, headers=sent)
                response = conn.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 0 and retry and not isinstance(exc, TimeoutError):
                    continue
                raise EventStoreError(0, "unreachable", f"{self.http_url}: {exc}") from None
            self._local.used = time.monotonic()
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                self._local.conn = None
            try:
                doc = json.loads(data) if data else None
            except ValueError:
                doc = None
            if response.status >= 400:
                error = doc.get("error", "error") if isinstance(doc, dict) else "error"
                message = doc.get("message", "") if isinstance(doc, dict) else data[:200]
                raise_for(response.status, error, str(message), doc)
            return response.status, doc, dict(response.getheaders())
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the calling thread's connection (other threads keep theirs)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def key_path(topic: str, key: str | bytes, events: bool = False) -> str:
    """The API's path of a key (its events with ``events``); a key that is not UTF-8 goes
    as unpadded URL-safe base64, flagged in the query."""
    raw = key_bytes(key)
    try:
        raw.decode("utf-8")
        segment, query = quote(raw, safe=""), ""
    except UnicodeDecodeError:
        segment = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        query = "?key_encoding=base64"
    path = f"/v1/topics/{quote(topic, safe='')}/keys/{segment}"
    return (path + "/events" if events else path) + query
