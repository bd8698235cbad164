"""The web console's routes on the broker's HTTP listener (docs/console.md):

  GET  /console/                       the page (static/index.html)
  GET  /console/static/<name>          its files
  GET  /console/api/session            {"secured", "principal", "csrf"}
  POST /console/api/login | logout
  GET  /console/api/overview
  GET|POST /console/api/topics         GET|DELETE /console/api/topics/{name}
  PATCH /console/api/topics/{name}/configs
  GET  /console/api/topics/{name}/messages
  GET  /console/api/groups             GET|DELETE /console/api/groups/{id}
  POST /console/api/groups/{id}/reset-offsets
  GET|POST /console/api/aggregates/{topic}/{key}
  GET  /console/api/schemas            /schemas/{s}/versions/{v}, /diff, /compatibility
  GET  /console/api/acls | users

Security: on a secured broker (an authorizer or a SASL listener, as the event store's
API) every API call but login and session needs a logged-in session (401). Every write
(POST, PUT, PATCH, DELETE; login excepted) needs the session's CSRF token in
X-CSRF-Token, and a write whose Origin is not this listener's own is refused (403
``csrf``); login checks the Origin too. The Kafka requests behind a page are made as the
session's principal (chronik.http.console.kafka); schemas and aggregates, which have no
Kafka API, are read in-process with the same ACL checks as their HTTP APIs (an aggregate
whose partition another broker leads is read or appended there, through that broker's
event store API, as the session's user: chronik.http.console.aggregates).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol
from urllib.parse import unquote

from chronik.http.auth import BasicAuth
from chronik.http.console import aggregates, groups, messages, overview, schemas, security
from chronik.http.console import topics as topics_api
from chronik.http.console.aggregates import EventStore
from chronik.http.console.kafka import KafkaSession, SharedMetadata
from chronik.http.console.params import json_body
from chronik.http.console.sessions import Session, Sessions, clear_cookie, set_cookie
from chronik.http.console.settings import (
    ConsoleConfigError,
    ConsoleSettings,
    connect_address,
    console_listener,
)
from chronik.http.console.static import HEADERS, static_file
from chronik.http.event_schemas import value_decoder
from chronik.http.server import HttpError, Request, Response, allow, query_params
from chronik.registry.schemas_topic import TOPIC as SCHEMAS_TOPIC
from chronik.security.acl_model import Operation
from chronik.security.authorizer import Authorizer
from chronik.security.broker_security import BrokerSecurity, ClientSecurity
from chronik.security.sasl_client import Credentials
from chronik.security.tls import client_context

log = logging.getLogger("chronik.http")

WRITES = ("POST", "PUT", "PATCH", "DELETE")
PREFERRED_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
MAX_CREDENTIAL_CHARS = 1024
FALLBACK_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>chronik console</title>"
    b"<p>The console's page is not installed in this build.</p>"
)


class ConsoleServices(Protocol):
    """What the console uses of the broker (chronik.broker.server wires it): its
    settings, security, and its schema registry (None when it serves none)."""

    @property
    def config_values(self) -> dict[str, str]: ...

    security: BrokerSecurity
    authorizer: Authorizer

    @property
    def registry(self) -> Any: ...


class Console:
    def __init__(
        self, services: ConsoleServices, events: EventStore, settings: ConsoleSettings,
        tls: bool,
    ) -> None:
        """Raises ConsoleConfigError when the console cannot work with the broker's
        listeners (a secured broker without a SASL listener)."""
        self.services = services
        self.events = events
        self.settings = settings
        self.tls = tls
        self.auth = BasicAuth(services.security, services.authorizer)
        self.secured = self.auth.secured
        sec = services.security
        self.listener = console_listener(sec.listeners, self.secured, settings.listener)
        self.address = connect_address(self.listener)
        self._client_tls = None
        if self.listener.tls:
            try:
                self._client_tls = client_context(sec.tls_settings)
            except (ValueError, OSError) as exc:
                raise ConsoleConfigError(
                    f"the console cannot connect to the {self.listener.name} listener: {exc}"
                ) from None
        self.sessions = Sessions(settings.max_sessions, settings.session_timeout)
        self._metadata = SharedMetadata()
        # Reads of an unsecured broker by a client without a session (a script).
        self._anonymous: KafkaSession | None = None

    def close(self) -> None:
        self.sessions.close()
        if self._anonymous is not None:
            self._anonymous.close()

    def _kafka(
        self, credentials: Credentials | None, mechanism: str | None, principal: str | None = None
    ) -> KafkaSession:
        security = None
        if self.listener.tls or credentials is not None:
            security = ClientSecurity(
                self.listener.name, self.listener.protocol, self._client_tls,
                mechanism if credentials is not None else None, credentials,
            )
        return KafkaSession(
            self.address, security, self.settings.request_timeout,
            self.settings.max_connections, principal=principal, shared=self._metadata,
        )

    # -- dispatch -------------------------------------------------------------------------
    async def route(self, request: Request) -> Response:
        try:
            status, body, headers = await self._route(request)
        except HttpError as exc:
            exc.headers = {**HEADERS, **exc.headers}
            if request.path.startswith("/console/api/"):
                exc.headers["Cache-Control"] = "no-store"
            raise
        return status, body, {**HEADERS, **headers}

    async def _route(self, request: Request) -> Response:
        path = request.path
        if path == "/console":
            allow(request, "GET", "HEAD")
            return 308, {"location": "/console/"}, {"Location": "/console/"}
        if path in ("/console/", "/console/index.html"):
            allow(request, "GET")
            try:
                return static_file("index.html")
            except HttpError:
                return 200, FALLBACK_PAGE, {"Content-Type": "text/html; charset=utf-8"}
        if path.startswith("/console/static/"):
            allow(request, "GET")
            return static_file(path[len("/console/static/") :])
        if path.startswith("/console/api/"):
            try:
                async with asyncio.timeout(self.settings.request_timeout * 4):
                    status, body, headers = await self._api(request)
            except TimeoutError:
                raise HttpError(503, "timeout", "the cluster did not answer in time") from None
            return status, body, {"Cache-Control": "no-store", **headers}
        raise HttpError(404, "not_found", f"no such resource: {path[:200]}")

    def _origin_ok(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return True
        host = request.headers.get("host", "")
        scheme = "https" if self.tls else "http"
        return bool(host) and origin == f"{scheme}://{host}"

    async def _api(self, request: Request) -> Response:
        try:
            parts = [unquote(p, errors="strict") for p in
                     request.path[len("/console/api/") :].split("/")]
        except UnicodeDecodeError:
            raise HttpError(400, "bad_request", "the path is not UTF-8") from None
        query = query_params(request.query)
        session = self.sessions.get(request.headers.get("cookie"))
        if parts == ["session"]:
            allow(request, "GET")
            return self._session(session)
        if request.method in WRITES and not self._origin_ok(request):
            raise HttpError(403, "csrf", "a write from another origin is refused")
        if parts == ["login"]:
            allow(request, "POST")
            return await self._login(request, session)
        token = request.headers.get("x-csrf-token")
        if request.method in WRITES and (session is None or not session.csrf_ok(token)):
            if self.secured and session is None:
                raise HttpError(401, "unauthorized", "log in first")
            raise HttpError(403, "csrf", "missing or wrong X-CSRF-Token")
        if parts == ["logout"]:
            allow(request, "POST")
            headers = {"Set-Cookie": clear_cookie(self.tls)}
            if session is not None:
                self.sessions.end(session)
            return 200, {"secured": self.secured, "principal": None, "csrf": None}, headers
        if self.secured and (session is None or session.principal is None):
            raise HttpError(401, "unauthorized", "log in first")
        if session is not None:
            kafka, principal, rates = session.kafka, session.principal, session.rates
        else:
            kafka, principal, rates = self._anonymous_kafka(), None, {}
        credentials = session.credentials if session is not None else None
        return await self._call(request, parts, query, kafka, principal, rates, credentials)

    def _anonymous_kafka(self) -> KafkaSession:
        if self._anonymous is None or self._anonymous.closed:
            self._anonymous = self._kafka(None, None)
        return self._anonymous

    def _session(self, session: Session | None) -> Response:
        headers: dict[str, str] = {}
        if session is None and not self.secured:
            session = self.sessions.create(None, self._kafka(None, None))
            headers["Set-Cookie"] = set_cookie(session, self.tls)
        body = {
            "secured": self.secured,
            "principal": session.principal if session is not None else None,
            "csrf": session.csrf if session is not None else None,
        }
        return 200, body, headers

    async def _login(self, request: Request, session: Session | None) -> Response:
        doc = json_body(request.body)
        user, password = doc.get("username"), doc.get("password")
        if not isinstance(user, str) or not isinstance(password, str) or not user or not password:
            raise HttpError(400, "bad_request", 'give {"username", "password"}')
        if len(user) > MAX_CREDENTIAL_CHARS or len(password) > MAX_CREDENTIAL_CHARS:
            raise HttpError(400, "bad_request", "username or password too long")
        if not self.secured:
            return self._session(session)
        principal = await self.auth.check(user, password, request.peer)
        mechanism = self._mechanism(user)
        if session is not None:
            self.sessions.end(session)
        credentials = Credentials(user, password)
        kafka = self._kafka(credentials, mechanism, principal)
        fresh = self.sessions.create(principal, kafka, credentials)
        log.info("console login of %s from %s", principal, request.peer)
        body = {"secured": True, "principal": principal, "csrf": fresh.csrf}
        return 200, body, {"Set-Cookie": set_cookie(fresh, self.tls)}

    def _mechanism(self, user: str) -> str:
        enabled = self.services.security.mechanisms
        held = set(self.services.security.store.mechanisms(user))
        for name in PREFERRED_MECHANISMS:
            if name in enabled and (name == "PLAIN" or name in held):
                return name
        raise HttpError(
            403, "no_mechanism",
            f"the {self.listener.name} listener takes none of this user's SASL mechanisms",
        )

    # -- the API --------------------------------------------------------------------------
    async def _call(
        self, request: Request, parts: list[str], query: dict[str, str], kafka: KafkaSession,
        principal: str | None, rates: dict[str, Any], credentials: Credentials | None,
    ) -> Response:
        head, rest = parts[0], parts[1:]
        m = request.method
        if head == "overview" and not rest:
            allow(request, "GET")
            return 200, await overview.overview(kafka), {}
        if head == "topics":
            return await self._topics(request, rest, query, kafka, principal, rates)
        if head == "groups":
            if not rest:
                allow(request, "GET")
                return 200, await groups.list_groups(kafka, query), {}
            group = rest[0]
            if len(rest) == 1:
                allow(request, "GET", "DELETE")
                if m == "DELETE":
                    return 200, await groups.delete_group(kafka, group), {}
                return 200, await groups.describe_group(kafka, group), {}
            if rest[1:] == ["reset-offsets"]:
                allow(request, "POST")
                body = json_body(request.body)
                return 200, await groups.reset_offsets(kafka, group, body), {}
        if head == "aggregates" and len(rest) == 2:
            allow(request, "GET", "POST")
            topic, key = rest
            if m == "GET":
                found = await aggregates.read_aggregate(
                    self.events, request, principal, topic, key, query, credentials)
                return 200, found, {}
            written = await aggregates.append_aggregate(
                self.events, request, principal, topic, key, json_body(request.body),
                credentials)
            return 201, {"topic": topic, "key": key, **written}, {}
        if head == "schemas":
            allow(request, "GET")
            return 200, await self._schemas(request, rest, query, principal), {}
        if head == "acls" and not rest:
            allow(request, "GET")
            return 200, await security.list_acls(kafka, self.secured, query), {}
        if head == "users" and not rest:
            allow(request, "GET")
            return 200, await security.list_users(kafka, self.secured, query), {}
        raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")

    async def _topics(
        self, request: Request, rest: list[str], query: dict[str, str], kafka: KafkaSession,
        principal: str | None, rates: dict[str, Any],
    ) -> Response:
        m = request.method
        if not rest:
            allow(request, "GET", "POST")
            if m == "POST":
                return 201, await topics_api.create_topic(kafka, json_body(request.body)), {}
            return 200, await topics_api.list_topics(kafka, rates, query), {}
        name = rest[0]
        if not name:
            raise HttpError(400, "bad_request", "empty topic name")
        if len(rest) == 1:
            allow(request, "GET", "DELETE")
            if m == "DELETE":
                return 200, await topics_api.delete_topic(kafka, name), {}
            return 200, await topics_api.describe_topic(kafka, name), {}
        if rest[1:] == ["configs"]:
            allow(request, "PATCH")
            return 200, await topics_api.alter_configs(kafka, name, json_body(request.body)), {}
        if rest[1:] == ["messages"]:
            allow(request, "GET")
            decoder = await self._decoder(request, principal, query.get("format") == "schema")
            found = await messages.read_messages(
                kafka, name, query, self.settings.messages_max_bytes, decoder)
            return 200, {"topic": name, **found}, {}
        raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")

    async def _decoder(self, request: Request, principal: str | None, asked: bool) -> Any:
        """The schema decoder of a read, None without a registry or the right to read
        schemas (403 when ``format=schema`` asked for it)."""
        registry = self.services.registry
        if registry is None:
            return None
        try:
            self.auth.authorize(request, principal, Operation.DESCRIBE, SCHEMAS_TOPIC)
        except HttpError:
            if asked:
                raise
            return None
        try:
            return (await value_decoder(registry)).fields
        except Exception as exc:  # a registry that cannot catch up: values shown plain
            log.debug("console: schema decoding off for one read: %s", exc)
            return None

    async def _schemas(
        self, request: Request, rest: list[str], query: dict[str, str], principal: str | None
    ) -> dict[str, Any]:
        registry = self.services.registry
        if registry is None:
            raise schemas.no_registry()
        self.auth.authorize(request, principal, Operation.DESCRIBE, SCHEMAS_TOPIC)
        if not rest:
            return await schemas.list_subjects(registry, query)
        subject = rest[0]
        if len(rest) == 3 and rest[1] == "versions":
            return await schemas.schema_version(registry, subject, rest[2])
        if rest[1:] == ["diff"]:
            return await schemas.diff(registry, subject, query)
        if rest[1:] == ["compatibility"]:
            return await schemas.compatibility(registry, subject)
        raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")
