"""The event store's HTTP API (``chronik serve --http-listen HOST:PORT``, or the broker
setting ``http.listen``): one aggregate's events read by key, and appended with an
expected version, as JSON over HTTP/1.1 with keep-alive. The description is
chronik/http/eventstore-openapi.yaml (docs/eventstore-openapi.yaml), served at
GET /v1/openapi.yaml.

  GET  /v1/topics/{topic}/keys/{key}                    {"partition", "version_count"}
  GET  /v1/topics/{topic}/keys/{key}/events?from_version=0&limit=100
  POST /v1/topics/{topic}/keys/{key}/events             If-Match: "<expected version>"
       ?subject=NAME | ?subject_strategy=topic [&version=N] [&message=pkg.Name]
                                                           values as JSON under a schema
  GET  ...events?decode=true                              framed values decoded to JSON

The same listener serves the web console under /console/ (chronik.http.console,
docs/console.md) when console.enable, or its loopback default, says so.

Schemas (chronik.http.event_schemas): an append naming a subject of the broker's schema
registry carries JSON documents as values, checked against the subject's schema (422 for
one that does not fit: nothing is written) and stored in Confluent's wire format; a read
with decode=true adds each framed value's schema id and its value as JSON.

Keys in the path are percent-encoded UTF-8 (``?key_encoding=base64`` for binary keys).
A read costs what the key's own events cost: the partition's key index
(chronik.storage.key_index) gives their offsets, chronik.storage.key_reads reads them. An
append builds one record batch (the first record carries chronik-expected-version) and
appends it as Produce does, answering once it is durable as acks=all is.

The partition of a key: the one whose index already has the key, else Kafka's default
partitioner for keyed records (chronik.records.partitioner). In a cluster, a request
about a partition another broker leads is forwarded to that broker's HTTP listener, as
it came (credentials, If-Match), and its answer passed back (chronik.http.leader_forward:
one hop at most, marked ``chronik-forwarded``). It is answered 421 with the leader's id
when the leader serves no HTTP listener, or when it came forwarded and this broker does
not lead the partition (any more); 503 leader_unreachable when the leader does not
answer; 503 leader_not_available when the partition has no live leader (or is not yet
served by the broker named leader).

Security: with an authorizer or a SASL listener, every request needs HTTP Basic
credentials, checked against the SCRAM credential store as SASL PLAIN checks them
(principal User:NAME), and ACLs as Fetch (READ on the topic) and Produce (WRITE) need;
an append naming a subject and a read with decode=true also need DESCRIBE on the topic
_schemas, as the registry's own reads do.

Limits (broker settings): http.max.connections (256; more are answered 503 and closed),
http.max.body.bytes (1 MiB; 413), http.request.timeout.ms (30 s to send a request head
or body, and the most a kept-alive connection may idle), a request head of at most
16 KiB (431) and 100 header lines, at most 1000 events per read page or append.
Bad input gets a 4xx status and a JSON error, never a crash.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, unquote_to_bytes

from chronik.http.auth import BasicAuth
from chronik.http.console.routes import Console
from chronik.http.console.settings import ConsoleConfigError, ConsoleSettings
from chronik.http.event_schemas import (
    SchemaSource,
    WriterSchema,
    requested_subject,
    value_decoder,
    writer_schema,
)
from chronik.http.leader_forward import FORWARDED, LeaderForward, LeaderUnreachable, led_by
from chronik.http.server import (
    HttpError,
    HttpServer,
    Request,
    Response,
    allow,
    parse_listen,
    query_params,
)
from chronik.protocol import errors
from chronik.records.batch import read_header
from chronik.records.builder import Record, build_batch
from chronik.records.partitioner import partition_for_key
from chronik.records.recompress import recompress, target_codec
from chronik.records.versions import EXPECTED_HEADER, VersionError
from chronik.registry.schemas_topic import TOPIC as SCHEMAS_TOPIC
from chronik.security.acl_model import Operation
from chronik.security.authorizer import Authorizer
from chronik.security.broker_security import BrokerSecurity
from chronik.storage.catalog import Catalog
from chronik.storage.key_reads import read_records
from chronik.storage.partition_log import PartitionLog
from chronik.storage.partition_writer import AppendOrigin, PartitionWriter

if TYPE_CHECKING:
    from chronik.cluster.node import ClusterNode

log = logging.getLogger("chronik.http")

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_EVENTS = 1000
DURABLE_TIMEOUT_S = 30.0
# A forwarded request waits for the leader's answer, an append's durability included.
FORWARD_TIMEOUT_S = DURABLE_TIMEOUT_S + 5.0
OPENAPI = "eventstore-openapi.yaml"

DEFAULTS = {
    "http.max.connections": "256",
    "http.max.body.bytes": str(1024 * 1024),
    "http.request.timeout.ms": "30000",
}


class EventStoreServices(Protocol):
    """What the event store's HTTP API uses of the broker (chronik.broker.server wires
    it): its settings, logs, writer and security, where a partition is led, and its
    schema registry (None when the broker serves none)."""

    @property
    def config_values(self) -> dict[str, str]: ...

    catalog: Catalog
    writer: PartitionWriter
    security: BrokerSecurity
    authorizer: Authorizer
    cluster: ClusterNode | None

    @property
    def registry(self) -> SchemaSource | None: ...

    def now_ms(self) -> int: ...

    def locate(self, name: str, index: int) -> tuple[PartitionLog | None, int]: ...

    def partition_count(self, name: str) -> int | None: ...

    def http_url_of(self, node_id: int) -> str | None: ...


class HttpApi:
    def __init__(self, broker: EventStoreServices) -> None:
        self.broker = broker
        values = {**DEFAULTS, **broker.config_values}
        self.auth = BasicAuth(broker.security, broker.authorizer)
        self.server = HttpServer.configured(self._route, values)
        self._openapi: bytes | None = None
        # The web console (chronik.http.console) on the same listener, when enabled.
        self.console: Console | None = None
        # Requests about partitions other brokers lead go to their HTTP listeners.
        self.leaders = LeaderForward(
            broker.http_url_of, broker.security.tls_settings, FORWARD_TIMEOUT_S
        )
        # This listener's base URL as other brokers reach it (registered in ZooKeeper).
        self.url: str | None = None

    async def serve(self, listen: str) -> int:
        bound = await self.bind(listen)
        await self.start()
        return bound

    async def bind(self, listen: str, advertised_host: str | None = None) -> int:
        """Bind the listener (connections wait until start()): the bound port. A cluster
        broker binds before it registers, so that its registration names the URL."""
        host, _, tls = parse_listen(listen)
        self._start_console(host, tls)
        scheme, host, bound = await self.server.serve_listen(
            listen, self.broker.security.tls, "http.listen", start=False
        )
        shown = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.url = f"{scheme}://{shown}:{bound}"
        log.info("event store HTTP API on %s://%s:%d/v1/", scheme, host, bound)
        if self.console is not None:
            log.info("web console on %s://%s:%d/console/", scheme, host, bound)
        return bound

    async def start(self) -> None:
        await self.server.start_serving()

    def _start_console(self, host: str, tls: bool) -> None:
        """The console, if console.enable (or its loopback default) says so; ValueError
        when it was asked for explicitly and cannot work with this broker."""
        settings = ConsoleSettings.from_values(self.broker.config_values, host)
        if not settings.enabled:
            return
        try:
            self.console = Console(self.broker, self, settings, tls)
        except ConsoleConfigError as exc:
            if settings.explicit:
                raise ValueError(str(exc)) from None
            log.warning("web console not started: %s", exc)

    async def close(self) -> None:
        await self.server.close()
        if self.console is not None:
            self.console.close()

    # -- the console's access to the event store ---------------------------------------------
    async def read_events(
        self, request: Request, principal: str | None, topic: str, key: bytes,
        query: dict[str, str],
    ) -> Response:
        return await self._read(request, principal, topic, key, query)

    async def append_events(
        self, request: Request, principal: str | None, topic: str, key: bytes,
        query: dict[str, str],
    ) -> Response:
        return await self._append(request, principal, topic, key, query)

    async def at_leader(self, leader: int, request: Request) -> Response:
        """``request`` (one of /v1/topics/...) answered by broker ``leader``'s HTTP
        listener; raises LeaderUnreachable."""
        return await self.leaders.send(request, leader)

    # -- requests -------------------------------------------------------------------------
    async def _route(self, request: Request) -> Response:
        if self.console is not None and (
            request.path == "/console" or request.path.startswith("/console/")
        ):
            return await self.console.route(request)
        parts = request.path.split("/")
        if parts[:2] != ["", "v1"]:
            raise HttpError(404, "not_found", "no such resource: the API is under /v1/")
        rest = parts[2:]
        if rest == ["openapi.yaml"]:
            allow(request, "GET")
            return 200, self._openapi_bytes(), {"Content-Type": "application/yaml"}
        if len(rest) not in (4, 5) or rest[0] != "topics" or rest[2] != "keys":
            raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")
        if len(rest) == 5 and rest[4] != "events":
            raise HttpError(404, "not_found", f"no such resource: {request.path[:200]}")
        query = query_params(request.query)
        topic = unquote(rest[1], errors="strict")
        key = _key(rest[3], query.get("key_encoding", "utf-8"))
        if not topic:
            raise HttpError(400, "bad_request", "empty topic name")
        if len(rest) == 4:
            allow(request, "GET")
        else:
            allow(request, "GET", "POST")
        principal = await self.auth.principal(request)
        try:
            if len(rest) == 4:
                return self._probe(request, principal, topic, key)
            if request.method == "GET":
                return await self._read(request, principal, topic, key, query)
            return await self._append(request, principal, topic, key, query)
        except HttpError as exc:
            leader = led_by(exc)
            if leader is None or request.headers.get(FORWARDED):
                raise  # one hop at most: a forwarded request is answered here
            return await self._forward(request, leader, exc)

    async def _forward(self, request: Request, leader: int, refused: HttpError) -> Response:
        """The leader's answer to a request about a partition it leads; the 421 itself
        when the leader serves no HTTP listener (a client may still reach it by Kafka)."""
        partition = refused.body.get("partition")
        if not self.leaders.serves(leader):
            refused.body["message"] = (
                f"{refused.body['message']}, which serves no HTTP listener (http.listen)"
            )
            raise refused
        try:
            return await self.leaders.send(request, leader)
        except LeaderUnreachable as exc:
            raise HttpError(
                503, "leader_unreachable", f"partition {partition}: {exc}",
                partition=partition, leader=leader,
            ) from None

    def _openapi_bytes(self) -> bytes:
        if self._openapi is None:
            self._openapi = (resources.files("chronik.http") / OPENAPI).read_bytes()
        return self._openapi

    def _locate(self, topic: str, key: bytes) -> tuple[Any, int, Any]:
        """(topic, partition, log) of a key on an opted-in topic; raises 404, 409, 421, 503."""
        broker = self.broker
        count = broker.partition_count(topic)
        local = broker.catalog.get(topic)
        if count is None or count < 1:
            raise HttpError(404, "unknown_topic", f"no topic {topic!r}")
        if local is not None and not local.log_config.key_versioning:
            raise HttpError(
                409,
                "versioning_disabled",
                f"topic {topic!r} does not have key.versioning.enable=true",
            )
        index = None
        if local is not None:
            for i, plog in enumerate(local.partitions):
                kidx = getattr(plog, "key_index", None)
                if kidx is not None and kidx.version_count(key) > 0:
                    index = i
                    break
        if index is None:
            index = partition_for_key(key, count)
        plog, code = broker.locate(topic, index)
        if plog is None:
            if code == errors.NOT_LEADER_OR_FOLLOWER and broker.cluster is not None:
                leader = broker.cluster.leader_of(topic, index)
                if leader < 0 or leader == broker.cluster.node_id:
                    # No live leader (its replicas down, an election under way), or this
                    # broker is named leader but does not serve the partition yet: there is
                    # nobody to send the client to; it may try again.
                    raise HttpError(
                        503,
                        "leader_not_available",
                        f"partition {index} of {topic!r} has no leader available",
                        partition=index,
                    )
                raise HttpError(
                    421,
                    "not_leader",
                    f"partition {index} of {topic!r} is led by broker {leader}",
                    partition=index,
                    leader=leader,
                )
            raise HttpError(404, "unknown_topic", f"no partition {index} of {topic!r}")
        if local is None:
            local = broker.catalog.get(topic)
        if local is None or not local.log_config.key_versioning:
            raise HttpError(
                409,
                "versioning_disabled",
                f"topic {topic!r} does not have key.versioning.enable=true",
            )
        if plog.key_index is None:
            raise HttpError(
                503, "index_unavailable", f"the key index of {topic}-{index} is not open"
            )
        return local, index, plog

    def _probe(self, request: Request, principal: str | None, topic: str, key: bytes) -> Response:
        self.auth.authorize(request, principal, Operation.READ, topic)
        _, index, plog = self._locate(topic, key)
        count = plog.key_index.version_count(key)
        body = {"topic": topic, "key": _text(key)[0], "partition": index, "version_count": count}
        return 200, body, {"ETag": f'"{count}"'}

    async def _read(
        self,
        request: Request,
        principal: str | None,
        topic: str,
        key: bytes,
        query: dict[str, str],
    ) -> Response:
        self.auth.authorize(request, principal, Operation.READ, topic)
        from_version = _int_param(query, "from_version", 0, 0, 2**62)
        limit = _int_param(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        decoder = None
        if _bool_param(query, "decode"):
            # Schemas are read as the registry's API reads them: DESCRIBE on _schemas.
            self.auth.authorize(request, principal, Operation.DESCRIBE, SCHEMAS_TOPIC)
            decoder = await value_decoder(self.broker.registry)
        _, index, plog = self._locate(topic, key)
        kidx = plog.key_index
        count = kidx.version_count(key)
        rows = kidx.events(key, from_version, limit)
        visible = plog.high_watermark
        shown = [(v, o) for v, o in rows if o < visible]
        records = {r.offset: r for r in read_records(plog, (o for _, o in shown))}
        events = []
        for version, offset in shown:
            record = records.get(offset)
            if record is None or record.key != key:
                continue
            event = _event(version, index, record)
            if decoder is not None:
                event.update(decoder.fields(record.value))
            events.append(event)
        next_version = None
        if len(rows) == limit and len(shown) == len(rows):
            next_version = rows[-1][0] + 1
        key_text, key_encoding = _text(key)
        body = {
            "topic": topic,
            "key": key_text,
            "key_encoding": key_encoding,
            "partition": index,
            "version_count": count,
            "events": events,
            "next_version": next_version,
        }
        return 200, body, {"ETag": f'"{count}"'}

    async def _append(
        self,
        request: Request,
        principal: str | None,
        topic: str,
        key: bytes,
        query: dict[str, str],
    ) -> Response:
        self.auth.authorize(request, principal, Operation.WRITE, topic)
        expected, must_exist = _precondition(request.headers)
        named = requested_subject(query, topic)
        schema = None
        if named is not None:
            self.auth.authorize(request, principal, Operation.DESCRIBE, SCHEMAS_TOPIC)
            schema = await writer_schema(self.broker.registry, *named)
        values = _events(request.body, schema)
        local, index, plog = self._locate(topic, key)
        broker = self.broker
        writer = broker.writer
        refused = writer.refusal(topic, index, AppendOrigin.HTTP)
        if refused is not None:
            raise HttpError(503, "not_enough_replicas", str(refused[1]))
        now = broker.now_ms()
        records = []
        for i, (value, headers) in enumerate(values):
            if i == 0 and expected is not None:
                headers = ((EXPECTED_HEADER, str(expected).encode()), *headers)
            records.append(Record(now, key, value, headers))
        batch = bytearray(build_batch(records))
        header = read_header(batch)
        if header.size > local.log_config.max_message_bytes:
            raise HttpError(
                413,
                "batch_too_large",
                f"the events make a batch of {header.size} bytes, over the topic's "
                f"max.message.bytes {local.log_config.max_message_bytes}",
            )
        codec = target_codec(local.log_config.compression_type)
        if codec is not None and codec != header.compression:
            batch, header = recompress(batch, header, codec)
        # Nothing awaits from here to the append: the version read is the one checked.
        kidx = plog.key_index
        before = kidx.version_count(key)
        if must_exist and before == 0:
            raise HttpError(
                412,
                "version_conflict",
                "the key has no events",
                key=_text(key)[0],
                expected=None,
                actual=0,
            )
        try:
            result = writer.append(plog, topic, batch, header, now, AppendOrigin.HTTP)
        except VersionError:
            actual = plog.key_index.version_count(key) if plog.key_index is not None else before
            raise HttpError(
                412,
                "version_conflict",
                f"version conflict on key {_text(key)[0]!r}: expected {expected}, actual {actual}",
                key=_text(key)[0],
                expected=expected,
                actual=actual,
            ) from None
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            status = 503 if code == errors.KAFKA_STORAGE_ERROR else 400
            raise HttpError(status, "append_failed", str(exc), kafka_error=code) from None
        try:
            code, message = await writer.durable(
                plog, topic, index, result.last_offset, DURABLE_TIMEOUT_S
            )
            if code != errors.NONE:
                raise HttpError(503, "not_replicated", str(message), kafka_error=code)
        except HttpError:
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code is None:
                raise
            raise HttpError(503, "not_durable", str(exc), kafka_error=code) from None
        n = len(records)
        body = {
            "topic": topic,
            "key": _text(key)[0],
            "partition": index,
            "first_version": before,
            "versions": list(range(before, before + n)),
            "offsets": list(range(result.base_offset, result.base_offset + n)),
        }
        if schema is not None:
            body.update(
                subject=schema.subject, schema_version=schema.version, schema_id=schema.schema_id
            )
        return 201, body, {"ETag": f'"{before + n}"'}


# -- helpers --------------------------------------------------------------------------------
def _bool_param(query: dict[str, str], name: str) -> bool:
    text = query.get(name)
    if text is None or text in ("", "false", "0"):
        return False
    if text in ("true", "1"):
        return True
    raise HttpError(400, "bad_request", f"{name} must be true or false")


def _int_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 19:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise HttpError(400, "bad_request", f"{name} must be an integer from {low} to {high}")
    return value


def _key(segment: str, encoding: str) -> bytes:
    raw = unquote_to_bytes(segment)
    if encoding == "utf-8":
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise HttpError(
                400, "bad_request", "the key is not UTF-8: use key_encoding=base64"
            ) from None
    elif encoding == "base64":
        raw = _b64(raw.decode("latin-1"), "key")
    else:
        raise HttpError(400, "bad_request", "key_encoding must be utf-8 or base64")
    if not raw:
        raise HttpError(400, "bad_request", "empty key")
    return raw


def _b64(text: str, what: str) -> bytes:
    text = text.strip().replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise HttpError(400, "bad_request", f"{what} is not valid base64") from None


def _text(data: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 text when the bytes decode, else base64."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _event(version: int, partition: int, record: Any) -> dict[str, Any]:
    key_text, key_encoding = _text(record.key)
    if record.value is None:
        value, value_encoding = None, None
    else:
        value, value_encoding = _text(record.value)
    headers = []
    for name, hvalue in record.headers:
        if hvalue is None:
            headers.append({"key": name, "value": None, "value_encoding": None})
        else:
            text, enc = _text(hvalue)
            headers.append({"key": name, "value": text, "value_encoding": enc})
    return {
        "version": version,
        "offset": record.offset,
        "partition": partition,
        "timestamp": record.timestamp,
        "key": key_text,
        "key_encoding": key_encoding,
        "value": value,
        "value_encoding": value_encoding,
        "headers": headers,
    }


def _precondition(headers: dict[str, str]) -> tuple[int | None, bool]:
    """(expected version, must exist) from If-Match / If-None-Match."""
    if_match = headers.get("if-match")
    if_none = headers.get("if-none-match")
    if if_match is not None and if_none is not None:
        raise HttpError(400, "bad_request", "send If-Match or If-None-Match, not both")
    if if_none is not None:
        if if_none.strip() != "*":
            raise HttpError(400, "bad_request", 'If-None-Match takes only "*" here')
        return 0, False
    if if_match is None:
        return None, False
    text = if_match.strip()
    if text == "*":
        return None, True
    if text.startswith("W/"):
        text = text[2:]
    text = text.strip('"')
    if not text.isdigit() or len(text) > 18:
        raise HttpError(400, "bad_request", 'If-Match must be "<version count>", e.g. "3"')
    return int(text), False


def _events(
    body: bytes, schema: WriterSchema | None = None
) -> list[tuple[bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    """The (value, headers) of each event of an append's JSON body; with a schema, each
    value is a JSON document written with it."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise HttpError(400, "bad_request", "the body is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise HttpError(400, "bad_request", 'the body must be {"events": [...]}')
    items = doc["events"]
    if not items:
        raise HttpError(400, "bad_request", "no events")
    if len(items) > MAX_EVENTS:
        raise HttpError(400, "bad_request", f"at most {MAX_EVENTS} events per append")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "value" not in item:
            raise HttpError(400, "bad_request", f'event {i} must be an object with "value"')
        value = _value(item, f"event {i}") if schema is None else _schema_value(item, i, schema)
        out.append((value, _headers(item.get("headers"), i)))
    return out


def _schema_value(item: dict[str, Any], i: int, schema: WriterSchema) -> bytes | None:
    if item.get("value_encoding") not in (None, "json"):
        raise HttpError(
            400,
            "bad_request",
            f"event {i}: with a schema subject the value is a JSON document "
            "(value_encoding json or none)",
        )
    value = item["value"]
    if value is None:
        # A tombstone, as Confluent's serializers leave None: no schema, no framing.
        return None
    return schema.encode(i, value)


def _value(item: dict[str, Any], what: str) -> bytes | None:
    value = item.get("value")
    encoding = item.get("value_encoding") or "utf-8"
    if encoding not in ("utf-8", "base64"):
        hint = (
            " (json is for the values of an append naming a subject)" if encoding == "json" else ""
        )
        raise HttpError(400, "bad_request", f"{what}: value_encoding must be utf-8 or base64{hint}")
    if value is None:
        return None
    if not isinstance(value, str):
        if encoding == "base64":
            raise HttpError(400, "bad_request", f"{what}: a base64 value must be a string")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if encoding == "base64":
        return _b64(value, f"{what}'s value")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise HttpError(400, "bad_request", f"{what}: the value is not valid UTF-8") from None


def _headers(raw: Any, i: int) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    pairs: list[tuple[str, dict[str, Any]]] = []
    if isinstance(raw, dict):
        for name, value in raw.items():
            if value is not None and not isinstance(value, str):
                raise HttpError(400, "bad_request", f"event {i}: header values must be strings")
            pairs.append((name, {"value": value}))
    elif isinstance(raw, list):
        for h in raw:
            if not isinstance(h, dict) or not isinstance(h.get("key"), str):
                raise HttpError(
                    400,
                    "bad_request",
                    f'event {i}: headers must be {{"name": "value"}} '
                    'or [{"key", "value", "value_encoding"}]',
                )
            if h.get("value") is not None and not isinstance(h.get("value"), str):
                raise HttpError(400, "bad_request", f"event {i}: header values must be strings")
            pairs.append((h["key"], h))
    else:
        raise HttpError(400, "bad_request", f"event {i}: headers must be an object or a list")
    out = []
    for name, h in pairs:
        if name.lower().startswith("chronik-"):
            raise HttpError(
                400, "bad_request", f"event {i}: chronik-* headers are the broker's (use If-Match)"
            )
        out.append((name, _value(h, f"event {i} header {name!r}")))
    return tuple(out)
