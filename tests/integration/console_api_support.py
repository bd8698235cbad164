"""A client of the console's JSON API as a browser uses it: a cookie per client, the CSRF
token from GET /console/api/session sent on every write, Origin as the page's own."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import quote, urlencode


class ConsoleClient:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self.cookie: str | None = None
        self.csrf: str | None = None
        # Every answer's raw bytes, for the check that no secret reaches a response.
        self.seen: list[bytes] = []

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        csrf: bool = True,
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, JSON or bytes, headers by lower-case name) of one request."""
        target = path + (f"?{urlencode(query)}" if query else "")
        sent = {"Host": f"{self.host}:{self.port}"}
        if self.cookie:
            sent["Cookie"] = self.cookie
        if method != "GET" and csrf and self.csrf:
            sent["X-CSRF-Token"] = self.csrf
        if body is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        payload = None if body is None else json.dumps(body).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, target, body=payload, headers=sent)
            response = conn.getresponse()
            data = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        self.seen.append(data)
        cookie = got.get("set-cookie")
        if cookie:
            pair = cookie.split(";", 1)[0]
            self.cookie = pair if pair.split("=", 1)[1] else None
        try:
            doc = json.loads(data)
        except ValueError:
            doc = data
        return response.status, doc, got

    def api(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        """The JSON answer of an API call that must succeed (2xx)."""
        status, doc, _ = self.request(method, "/console/api/" + path, body, query or None)
        assert 200 <= status < 300, (method, path, status, doc)
        return doc

    def get(self, path: str, **query: Any) -> Any:
        return self.api("GET", path, **query)

    def session(self) -> dict[str, Any]:
        doc = self.get("session")
        self.csrf = doc["csrf"]
        return doc

    def login(self, user: str, password: str) -> tuple[int, Any]:
        status, doc, _ = self.request(
            "POST", "/console/api/login", {"username": user, "password": password},
            headers={"Origin": self.origin},
        )
        if status == 200:
            self.csrf = doc["csrf"]
        return status, doc


def seg(text: str) -> str:
    """A path segment, percent-encoded."""
    return quote(text, safe="")
