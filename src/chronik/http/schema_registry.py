"""Confluent Schema Registry's REST API, served by the broker
(``chronik serve --schema-registry-listen HOST:PORT`` or ``schema.registry.listen``) at
the root of its own listener, so clients take its plain base URL unchanged.

  GET    /                                      {}
  GET    /schemas/types                         ["AVRO","JSON","PROTOBUF"]
  GET    /schemas?subjectPrefix=&deleted=&latestOnly=
  GET    /schemas/ids/{id}[/schema|/subjects|/versions]
  GET    /subjects?subjectPrefix=&deleted=&deletedOnly=
  POST   /subjects/{s}?normalize=&deleted=      lookup
  DELETE /subjects/{s}?permanent=
  GET    /subjects/{s}/versions?deleted=&deletedOnly=
  POST   /subjects/{s}/versions?normalize=      register
  GET    /subjects/{s}/versions/{v}[/schema|/referencedby]?deleted=
  DELETE /subjects/{s}/versions/{v}?permanent=
  POST   /compatibility/subjects/{s}/versions[/{v}]?verbose=&normalize=
  GET|PUT|DELETE /config[/{s}]?defaultToGlobal=
  GET|PUT|DELETE /mode[/{s}]?defaultToGlobal=&force=
  GET    /contexts                              ["."]

Answers are ``application/vnd.schemaregistry.v1+json``; errors are Confluent's
``{"error_code": N, "message": ...}`` with its codes (chronik.registry.errors). Request
bodies are JSON of at most http.max.body.bytes; a Content-Type other than Confluent's,
application/json or application/octet-stream is 415.

Reads are answered from this broker's copy of ``_schemas``; writes by the primary, to
which any other broker forwards them (and then waits, up to a few seconds, until its
own copy has the write, so a client reads its write back from the broker it asked).
A broker without a copy forwards reads too.

Security: with an authorizer or a SASL listener, every request needs HTTP Basic
credentials of a SCRAM user (as the event store's API). ACLs, on the topic ``_schemas``:
reads, lookups and compatibility checks need DESCRIBE; registering and deleting schemas
WRITE; changing a config or a mode ALTER_CONFIGS. Refusals are Confluent's: 401 with
error code 40101 (and a Basic challenge) for missing or wrong credentials, 403 with 40301
for a missing ACL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

from chronik.http.auth import BasicAuth
from chronik.http.forward import ForwardFailed, forward
from chronik.http.server import HttpError, HttpServer, Request, Response, query_params
from chronik.registry import errors
from chronik.registry.errors import NotPrimary, RegistryError
from chronik.registry.registry import SchemaRegistry, schema_json
from chronik.registry.schemas_topic import TOPIC, SchemasTopic
from chronik.registry.topic_format import Reference
from chronik.schemas.types import SCHEMA_TYPES
from chronik.security.acl_model import Operation
from chronik.security.authorizer import Authorizer
from chronik.security.broker_security import BrokerSecurity
from chronik.security.tls import client_context

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("chronik.registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED_TYPES = (
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
)
FORWARDED = "chronik-forwarded"
OFFSET_HEADER = "chronik-schemas-offset"
READ_YOUR_WRITE_SECONDS = 5.0
# Confluent's codes for a refused request: 40101 no or wrong credentials, 40301 an ACL.
CONFLUENT_AUTH_CODES = {401: 40101, 403: 40301}

DEFAULTS = {
    "http.max.connections": "256",
    "http.max.body.bytes": str(2 * 1024 * 1024),
    "http.request.timeout.ms": "30000",
}


class RegistryServices(Protocol):
    """What the registry's HTTP API uses of the broker (chronik.broker.server wires it)."""

    @property
    def config_values(self) -> dict[str, str]: ...

    security: BrokerSecurity
    authorizer: Authorizer

    def registry_url_of(self, node_id: int) -> str | None: ...


class SchemaRegistryApi:
    def __init__(
        self, broker: RegistryServices, registry: SchemaRegistry, topic: SchemasTopic
    ) -> None:
        self.broker = broker
        self.registry = registry
        self.topic = topic
        values = {**DEFAULTS, **broker.config_values}
        self.auth = BasicAuth(broker.security, broker.authorizer)
        self.server = HttpServer.configured(self._route, values)
        self.timeout = registry.timeout
        self._client_tls: ssl.SSLContext | None = None
        self.url: str | None = None

    async def serve(self, listen: str, advertised_host: str | None = None) -> int:
        scheme, host, bound = await self.server.serve_listen(
            listen, self.broker.security.tls, "schema.registry.listen"
        )
        shown = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.url = f"{scheme}://{shown}:{bound}"
        log.info("schema registry on %s://%s:%d/", scheme, host, bound)
        return bound

    async def close(self) -> None:
        await self.server.close()

    # -- requests -------------------------------------------------------------------------
    async def _route(self, request: Request) -> Response:
        try:
            principal = await self.auth.principal(request)
            write = _is_write(request)
            if request.method in ("POST", "PUT"):
                _check_content_type(request)
            operation = _operation(request)
            self.auth.authorize(request, principal, operation, TOPIC)
            if write and not self.topic.is_primary() and self._primary_known():
                return await self._forward(request)
            if not write and not self.topic.has_copy() and self._primary_known():
                return await self._forward(request)
            if not write:
                await self.registry.catch_up()
            try:
                try:
                    status, body, headers = await self._handle(request)
                except RegistryError as exc:
                    if write or exc.status != 404:
                        raise
                    # Not found here may be not read yet: this copy reads on once,
                    # as far as it holds (a follower learns what is committed late).
                    await self.registry.catch_up_committed(1.0)
                    status, body, headers = await self._handle(request)
            except NotPrimary:
                if request.headers.get(FORWARDED) or not self._primary_known():
                    raise
                return await self._forward(request)
            if write:
                headers[OFFSET_HEADER] = str(self.registry.state.next_offset)
            return status, _json(body), {"Content-Type": CONTENT_TYPE, **headers}
        except RegistryError as exc:
            return (
                exc.status,
                _json({"error_code": exc.code, "message": exc.message}),
                {"Content-Type": CONTENT_TYPE},
            )
        except HttpError as exc:
            code = CONFLUENT_AUTH_CODES.get(exc.status, exc.status)
            return (
                exc.status,
                _json({"error_code": code, "message": exc.body["message"]}),
                {
                    "Content-Type": CONTENT_TYPE,
                    **exc.headers,
                },
            )

    def _primary_known(self) -> bool:
        """Whether another broker is the primary to forward to."""
        return self.topic.forward_target() is not None

    async def _forward(self, request: Request) -> Response:
        if request.headers.get(FORWARDED):
            raise NotPrimary("a forwarded request reached a broker that is not the primary")
        primary = self.topic.forward_target()
        if primary is None:
            raise NotPrimary("no primary is known")
        url = self.broker.registry_url_of(primary)
        if url is None:
            raise errors.forward_error(f"broker {primary} serves no schema registry")
        parts = urlsplit(url)
        tls = None
        if parts.scheme == "https":
            if self._client_tls is None:
                self._client_tls = client_context(self.broker.security.tls_settings)
            tls = self._client_tls
        try:
            status, body, headers = await forward(
                request,
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                self.timeout,
                tls,
                {FORWARDED: "1"},
            )
        except ForwardFailed as exc:
            raise errors.forward_error(str(exc)) from None
        self.registry.forwarded_writes += 1
        offset = headers.get(OFFSET_HEADER)
        if offset is not None and offset.isdigit() and self.topic.has_copy():
            await self._await_offset(int(offset))
        out = {"Content-Type": headers.get("content-type", CONTENT_TYPE)}
        return status, body, out

    async def _await_offset(self, offset: int) -> None:
        deadline = time.monotonic() + READ_YOUR_WRITE_SECONDS
        while self.registry.state.next_offset < offset and time.monotonic() < deadline:
            await self.registry.catch_up()
            if self.registry.state.next_offset < offset:
                await asyncio.sleep(0.02)

    async def _handle(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        path = request.path.rstrip("/") or "/"
        parts = [unquote(p) for p in path.split("/")[1:]] if path != "/" else []
        query = query_params(request.query)
        method = request.method
        if not parts:
            _allow(method, "GET")
            return 200, {}, {}
        head = parts[0]
        if head == "schemas":
            return self._schemas(method, parts[1:], query)
        if head == "subjects":
            return await self._subjects(request, parts[1:], query)
        if head == "compatibility":
            return self._compatibility(request, parts[1:], query)
        if head == "config":
            return await self._config(request, parts[1:], query)
        if head == "mode":
            return await self._mode(request, parts[1:], query)
        if head == "contexts" and len(parts) == 1:
            _allow(method, "GET")
            return 200, ["."], {}
        raise _not_found()

    # -- /schemas -----------------------------------------------------------------------
    def _schemas(
        self, method: str, rest: list[str], query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        _allow(method, "GET")
        reg = self.registry
        if not rest:
            found = reg.list_schemas(
                query.get("subjectPrefix", ""),
                _flag(query, "deleted"),
                _flag(query, "latestOnly"),
            )
            return 200, [r.to_json() for r in found], {}
        if rest == ["types"]:
            return 200, list(SCHEMA_TYPES), {}
        if rest[0] != "ids" or len(rest) < 2 or len(rest) > 3:
            raise _not_found()
        schema_id = _int_id(rest[1])
        stored = reg.schema_by_id(schema_id)
        if len(rest) == 2:
            return 200, {k: v for k, v in schema_json(stored).items() if k != "id"}, {}
        deleted = _flag(query, "deleted")
        if rest[2] == "schema":
            return 200, stored.text.encode(), {}
        if rest[2] == "subjects":
            return 200, sorted({s for s, _ in reg.subjects_of(schema_id, deleted)}), {}
        if rest[2] == "versions":
            pairs = reg.subjects_of(schema_id, deleted)
            return 200, [{"subject": s, "version": v} for s, v in pairs], {}
        raise _not_found()

    # -- /subjects -----------------------------------------------------------------------
    async def _subjects(
        self, request: Request, rest: list[str], query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        reg = self.registry
        method = request.method
        if not rest:
            _allow(method, "GET")
            prefix = query.get("subjectPrefix", "")
            names = reg.state.subject_names(
                deleted=_flag(query, "deleted"), deleted_only=_deleted_only(query)
            )
            return 200, [n for n in names if n.startswith(prefix)], {}
        subject = rest[0]
        if len(rest) == 1:
            _allow(method, "POST", "DELETE")
            if method == "DELETE":
                return 200, await reg.delete_subject(subject, _flag(query, "permanent")), {}
            body = _body(request)
            found = reg.lookup(
                subject,
                *_schema_of(body),
                _flag(query, "normalize"),
                _flag(query, "deleted"),
            )
            return 200, found.to_json(), {}
        if rest[1] != "versions":
            raise _not_found()
        if len(rest) == 2:
            _allow(method, "GET", "POST")
            if method == "GET":
                versions = reg.versions(subject, _flag(query, "deleted"), _deleted_only(query))
                return 200, versions, {}
            body = _body(request)
            schema_type, text, refs = _schema_of(body)
            schema_id = _optional_int(body, "id")
            version = _optional_int(body, "version")
            new_id, _ = await reg.register(
                subject,
                schema_type,
                text,
                refs,
                _flag(query, "normalize"),
                schema_id,
                version,
            )
            return 200, {"id": new_id}, {}
        spec = rest[2]
        if len(rest) == 3:
            _allow(method, "GET", "DELETE")
            if method == "DELETE":
                return 200, await reg.delete_version(subject, spec, _flag(query, "permanent")), {}
            return 200, reg.version(subject, spec, _flag(query, "deleted")).to_json(), {}
        if len(rest) == 4 and rest[3] == "schema":
            _allow(method, "GET")
            found = reg.version(subject, spec, _flag(query, "deleted"))
            return 200, found.schema.text.encode(), {}
        if len(rest) == 4 and rest[3] == "referencedby":
            _allow(method, "GET")
            found = reg.version(subject, spec, deleted=True)
            return 200, reg.state.referenced_by(subject, found.version), {}
        raise _not_found()

    # -- /compatibility -------------------------------------------------------------------
    def _compatibility(
        self, request: Request, rest: list[str], query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        if len(rest) not in (3, 4) or rest[0] != "subjects" or rest[2] != "versions":
            raise _not_found()
        _allow(request.method, "POST")
        subject = rest[1]
        spec = rest[3] if len(rest) == 4 else None
        body = _body(request)
        reg = self.registry
        if spec is not None and not reg.state.versions(subject):
            # Confluent answers a check against a subject with nothing registered as
            # compatible for "latest", and not found for a named version.
            if str(spec).lower() in ("latest", "-1"):
                return 200, _compat_answer([], query), {}
            raise errors.subject_not_found(subject)
        messages = reg.check(subject, spec, *_schema_of(body), _flag(query, "normalize"))
        return 200, _compat_answer(messages, query), {}

    # -- /config and /mode ------------------------------------------------------------------
    async def _config(
        self, request: Request, rest: list[str], query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        subject = _scope(request, rest)
        reg = self.registry
        method = request.method
        if method == "GET":
            return 200, reg.config(subject, _flag(query, "defaultToGlobal")), {}
        if method == "DELETE":
            return 200, await reg.delete_config(subject), {}
        body = _body(request)
        normalize = body.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise RegistryError(422, 422, "normalize must be true or false")
        return 200, await reg.set_config(subject, body.get("compatibility"), normalize), {}

    async def _mode(
        self, request: Request, rest: list[str], query: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        subject = _scope(request, rest)
        reg = self.registry
        method = request.method
        if method == "GET":
            return 200, {"mode": reg.mode(subject, _flag(query, "defaultToGlobal"))}, {}
        if method == "DELETE":
            if subject is None:
                raise RegistryError(405, 405, "The global mode cannot be deleted")
            return 200, {"mode": await reg.delete_mode(subject)}, {}
        body = _body(request)
        mode = await reg.set_mode(subject, body.get("mode"), _flag(query, "force"))
        return 200, {"mode": mode}, {}


def _scope(request: Request, rest: list[str]) -> str | None:
    """The subject of a /config or /mode path (None: the global one)."""
    if len(rest) > 1:
        raise _not_found()
    _allow(request.method, "GET", "PUT", "DELETE")
    return rest[0] if rest else None


def _json(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(body, separators=(",", ":")).encode()


def _not_found() -> RegistryError:
    return RegistryError(404, 404, "HTTP 404 Not Found")


def _allow(method: str, *methods: str) -> None:
    if method not in methods:
        raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "false").lower() == "true"


def _deleted_only(query: dict[str, str]) -> bool:
    # confluent-kafka's Python client spells Confluent's deletedOnly as deleted_only.
    return _flag(query, "deletedOnly") or _flag(query, "deleted_only")


def _int_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise RegistryError(404, 404, f"HTTP 404 Not Found: {text[:50]!r} is not an id") from None
    if value < 0:
        raise errors.schema_not_found(f"Schema {value} not found")
    return value


def _optional_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RegistryError(422, 422, f"{name} must be a positive integer")
    return value


def _check_content_type(request: Request) -> None:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype not in ACCEPTED_TYPES:
        raise RegistryError(415, 415, "HTTP 415 Unsupported Media Type")


def _body(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryError(400, 400, f"Unexpected character in the body: {exc}") from None
    if not isinstance(body, dict):
        raise RegistryError(422, 422, "The body must be a JSON object")
    return body


def _schema_of(body: dict[str, Any]) -> tuple[str, str, tuple[Reference, ...]]:
    text = body.get("schema")
    if not isinstance(text, str):
        raise errors.RegistryError(422, 42201, "Invalid schema: the body has no 'schema' string")
    schema_type = body.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
        raise errors.RegistryError(422, 42201, f"Invalid schema type {schema_type!r}")
    refs = body.get("references") or []
    if not isinstance(refs, list):
        raise errors.RegistryError(422, 42201, "Invalid schema: references must be a list")
    references = []
    for ref in refs:
        if (
            not isinstance(ref, dict)
            or not isinstance(ref.get("name"), str)
            or not isinstance(ref.get("subject"), str)
            or isinstance(ref.get("version"), bool)
            or not isinstance(ref.get("version"), int)
        ):
            raise errors.RegistryError(
                422, 42201, "Invalid schema: a reference needs a name, subject and version"
            )
        references.append(Reference(ref["name"], ref["subject"], ref["version"]))
    return schema_type.upper(), text, tuple(references)


def _compat_answer(messages: list[str], query: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"is_compatible": not messages}
    if _flag(query, "verbose"):
        out["messages"] = messages
    return out


def _is_write(request: Request) -> bool:
    parts = [p for p in request.path.split("/") if p]
    if not parts:
        return False
    if parts[0] in ("config", "mode"):
        return request.method in ("PUT", "DELETE")
    if parts[0] == "subjects":
        if request.method == "DELETE":
            return True
        return request.method == "POST" and len(parts) == 3 and parts[2] == "versions"
    return False


def _operation(request: Request) -> Operation:
    parts = [p for p in request.path.split("/") if p]
    if not _is_write(request):
        return Operation.DESCRIBE
    if parts[0] in ("config", "mode"):
        return Operation.ALTER_CONFIGS
    return Operation.WRITE
