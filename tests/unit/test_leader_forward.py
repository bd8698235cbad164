"""A request passed to the leading broker's HTTP listener (chronik.http.leader_forward),
against a real HttpServer in this process: what is sent (the forwarded marker, the
credentials and expected version, nothing of the browser's cookie or CSRF token), what
comes back (status, body, type, ETag), over TLS checked against the broker's trust
store, and a clear LeaderUnreachable when the leader registered no listener, does not
answer, or shows a certificate the trust store does not vouch for."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import pytest

from chronik.http.leader_forward import FORWARDED, LeaderForward, LeaderUnreachable, led_by
from chronik.http.server import HttpError, HttpServer, Request, Response
from chronik.security.tls import TlsSettings, server_context
from integration.ports import free_port
from integration.tls_support import make_pki


async def _exchange(
    url_of: dict[int, str],
    request: Request,
    server_tls: ssl.SSLContext | None = None,
    trust: TlsSettings | None = None,
) -> tuple[Response, list[Request]]:
    seen: list[Request] = []

    async def route(got: Request) -> Response:
        seen.append(got)
        return 412, {"error": "version_conflict", "actual": 4}, {"ETag": '"4"'}

    server = HttpServer(route, max_connections=4, max_body=1024, timeout=5)
    port = await server.serve("127.0.0.1", 0, server_tls)
    urls = {k: v.replace("PORT", str(port)) for k, v in url_of.items()}
    try:
        forward = LeaderForward(urls.get, trust or TlsSettings.from_config({}), 5.0)
        return await forward.send(request, 3), seen
    finally:
        await server.close()


def request() -> Request:
    headers = {"authorization": "Basic YTpi", "if-match": '"3"', "content-type":
               "application/json", "cookie": "chronik_console=secret", "x-csrf-token": "t"}
    r = Request("POST", "/v1/topics/t/keys/k%2F/events?subject=s", headers, "10.0.0.1")
    r.body = b'{"events":[{"value":"x"}]}'
    return r


def test_the_leader_gets_the_request_marked_and_its_answer_comes_back() -> None:
    (status, body, headers), seen = asyncio.run(
        _exchange({3: "http://127.0.0.1:PORT"}, request())
    )
    assert status == 412 and json.loads(body) == {"error": "version_conflict", "actual": 4}
    assert headers == {"Content-Type": "application/json", "ETag": '"4"'}
    (got,) = seen
    assert (got.method, got.path, got.query) == ("POST", "/v1/topics/t/keys/k%2F/events",
                                                 "subject=s")
    assert got.body == request().body
    assert got.headers[FORWARDED] == "1"
    assert got.headers["authorization"] == "Basic YTpi" and got.headers["if-match"] == '"3"'
    assert "cookie" not in got.headers and "x-csrf-token" not in got.headers


def test_a_leader_without_a_listener_or_not_answering_is_unreachable() -> None:
    with pytest.raises(LeaderUnreachable, match="broker 3 serves no HTTP listener"):
        asyncio.run(_exchange({}, request()))
    closed = free_port()
    with pytest.raises(LeaderUnreachable, match=f"broker 3 did not answer at .*:{closed}"):
        asyncio.run(_exchange({3: f"http://127.0.0.1:{closed}"}, request()))


def test_only_a_not_leader_answer_names_a_leader() -> None:
    assert led_by(HttpError(421, "not_leader", "led by 2", partition=0, leader=2)) == 2
    assert led_by(HttpError(503, "leader_not_available", "none", partition=0)) is None
    assert led_by(HttpError(421, "other", "x", leader=2)) is None


def test_over_tls_the_leader_is_checked_against_the_trust_store(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    pem = pki.issue("broker", "localhost", server=True)
    settings = TlsSettings.from_config({
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
    })
    (status, _, _), seen = asyncio.run(_exchange(
        {3: "https://127.0.0.1:PORT"}, request(), server_context(settings), settings))
    assert status == 412 and seen[0].headers[FORWARDED] == "1"
    stranger = TlsSettings.from_config({})  # the system's CAs only
    with pytest.raises(LeaderUnreachable, match="broker 3 did not answer at https://"):
        asyncio.run(_exchange(
            {3: "https://127.0.0.1:PORT"}, request(), server_context(settings), stranger))
