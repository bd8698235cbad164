"""The schema registry as the Spark source and sink reach it: Confluent's REST API over HTTP.

Any Confluent-compatible registry serves (chronik's own, Confluent's, Karapace). The calls:
``GET /schemas/ids/{id}`` (a record's writer schema), ``GET /subjects/{s}/versions/{v}``
(a reader schema, and each reference's text) and ``POST /subjects/{s}/versions`` (the sink's
``autoRegisterSchema``). Parsed schemas are cached per process by id, so each executor asks
for a writer schema once, however many records carry its id.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from chronik.schemas.formats import parse
from chronik.schemas.types import ParsedSchema, SchemaError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_RESPONSE_BYTES = 16 << 20
MAX_CACHED_SCHEMAS = 10_000
MAX_REFERENCE_DEPTH = 32
TIMEOUT_S = 30.0
# Confluent's error codes a caller tells apart.
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403


class RegistryError(RuntimeError):
    """The registry refused a call, or could not be reached; ``code`` is Confluent's
    error code (40401 subject not found, ...) or the HTTP status, 0 when unreachable."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


class FetchedSchema:
    """A schema as the registry answered it; parsed when first asked (a JSON Schema is
    only read as a document here, so it is never parsed)."""

    def __init__(self, schema_type: str, text: str, references: dict[str, str], what: str):
        self.schema_type = schema_type
        self.text = text
        self.references = references
        self.what = what
        self._parsed: ParsedSchema | None = None

    @property
    def parsed(self) -> ParsedSchema:
        if self._parsed is None:
            try:
                self._parsed = parse(self.schema_type, self.text, self.references)
            except SchemaError as exc:
                raise RegistryError(
                    f"{self.what} does not parse as {self.schema_type}: {exc}"
                ) from None
        return self._parsed

    def document(self) -> Any:
        """The schema text as JSON (Avro and JSON Schema)."""
        try:
            return json.loads(self.text)
        except ValueError:
            raise RegistryError(f"{self.what} is not JSON") from None


@dataclass(frozen=True)
class SubjectSchema:
    """One version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: FetchedSchema


class RegistryClient:
    def __init__(self, url: str, timeout_s: float = TIMEOUT_S):
        parts = urllib.parse.urlsplit(url)
        self.auth: str | None = None
        if parts.username is not None:  # http://user:secret@host:port: basic auth
            user = urllib.parse.unquote(parts.username)
            creds = f"{user}:{urllib.parse.unquote(parts.password or '')}"
            self.auth = "Basic " + base64.b64encode(creds.encode()).decode()
            netloc = parts.hostname or ""
            if parts.port:
                netloc = f"{netloc}:{parts.port}"
            parts = parts._replace(netloc=netloc)
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.timeout_s = timeout_s
        self._by_id: OrderedDict[int, FetchedSchema] = OrderedDict()
        self._lock = threading.Lock()

    # -- calls ----------------------------------------------------------------------------

    def _call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method="GET" if data is None else "POST"
        )
        request.add_header("Accept", CONTENT_TYPE)
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise _refused(exc, self.url + path) from None
        except (OSError, ValueError) as exc:
            raise RegistryError(f"schema registry {self.url} unreachable: {exc}") from None
        if len(payload) > MAX_RESPONSE_BYTES:
            raise RegistryError(
                f"schema registry answer to {path} is over {MAX_RESPONSE_BYTES} bytes"
            )
        try:
            return json.loads(payload)
        except ValueError:
            raise RegistryError(f"schema registry answer to {path} is not JSON") from None

    def schema(self, schema_id: int) -> FetchedSchema:
        """The schema with this id, its references resolved; cached."""
        with self._lock:
            found = self._by_id.get(schema_id)
        if found is not None:
            return found
        answer = self._call(f"/schemas/ids/{int(schema_id)}")
        parsed = self._parse(answer, f"schema id {schema_id}")
        with self._lock:
            self._by_id[schema_id] = parsed
            while len(self._by_id) > MAX_CACHED_SCHEMAS:
                self._by_id.popitem(last=False)
        return parsed

    def version(self, subject: str, version: str | int = "latest") -> SubjectSchema:
        answer = self._call(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}")
        parsed = self._parse(answer, f"subject {subject!r} version {version}")
        schema_id = int(answer["id"])
        with self._lock:
            self._by_id.setdefault(schema_id, parsed)
        return SubjectSchema(subject, int(answer["version"]), schema_id, parsed)

    def register(self, subject: str, schema_type: str, text: str) -> int:
        """Register ``text`` under ``subject`` (or find it there); its id."""
        body: dict[str, Any] = {"schema": text}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        answer = self._call(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions", body)
        return int(answer["id"])

    # -- parsing --------------------------------------------------------------------------

    def _parse(self, answer: dict[str, Any], what: str) -> FetchedSchema:
        schema_type = answer.get("schemaType") or "AVRO"
        references = self._references(answer.get("references") or [], 0)
        return FetchedSchema(schema_type, answer["schema"], references, what)

    def _references(self, refs: list[dict[str, Any]], depth: int) -> dict[str, str]:
        """Each reference's name -> text, the references of references included."""
        if depth > MAX_REFERENCE_DEPTH:
            raise RegistryError(f"schema references nest deeper than {MAX_REFERENCE_DEPTH}")
        out: dict[str, str] = {}
        for ref in refs:
            answer = self._call(
                f"/subjects/{urllib.parse.quote(ref['subject'], safe='')}"
                f"/versions/{int(ref['version'])}"
            )
            out.update(self._references(answer.get("references") or [], depth + 1))
            out[ref["name"]] = answer["schema"]
        return out


def _refused(exc: urllib.error.HTTPError, url: str) -> RegistryError:
    try:
        body = json.loads(exc.read(MAX_RESPONSE_BYTES))
        code, message = int(body.get("error_code", exc.code)), str(body.get("message", ""))
    except (ValueError, AttributeError, TypeError, OSError):
        code, message = exc.code, exc.reason
    return RegistryError(f"{message} (error {code} from {url})", code)


_clients: dict[str, RegistryClient] = {}
_clients_lock = threading.Lock()


def client_for(url: str) -> RegistryClient:
    """One client (and schema cache) per registry URL per process."""
    with _clients_lock:
        found = _clients.get(url)
        if found is None:
            found = _clients[url] = RegistryClient(url)
        return found
