"""The console's Kafka client: one login session's connections to the cluster's brokers,
authenticated as the session's principal, so every read and write the console makes is
checked by the same ACLs as any other client's request.

A session starts at this broker's own listener (the console's listener) and reaches the
other brokers at the endpoints Metadata names for that listener: leaders for ListOffsets
and Fetch, coordinators for groups, the controller for topic changes. Connections are
pooled per broker, at most ``max_connections`` per session (the least recently used one
is closed to make room); every request has a deadline, and a broker that does not answer
in time gives 503, never a hung page. Metadata of the whole cluster is cached for
METADATA_TTL seconds, so a page that asks several times costs one request.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from chronik.cluster.replica_client import (
    AuthenticationRefused,
    BrokerClient,
    BrokerUnreachable,
    request_module,
)
from chronik.http.server import HttpError
from chronik.protocol.compat import build

if TYPE_CHECKING:
    from chronik.security.broker_security import ClientSecurity

METADATA_TTL = 1.0
# Partitions in one ListOffsets or DescribeLogDirs request of the console (see chunks).
MAX_PARTITIONS_PER_REQUEST = 100
BOOTSTRAP = -1

# The API versions the console speaks (all served by chronik, docs/compat.md).
METADATA = (3, 12)
LIST_OFFSETS = (2, 7)
FETCH = (1, 12)
DESCRIBE_CONFIGS = (32, 4)
INCREMENTAL_ALTER_CONFIGS = (44, 1)
CREATE_TOPICS = (19, 7)
DELETE_TOPICS = (20, 5)
LIST_GROUPS = (16, 4)
DESCRIBE_GROUPS = (15, 5)
OFFSET_FETCH = (9, 8)
OFFSET_COMMIT = (8, 8)
DELETE_GROUPS = (42, 2)
FIND_COORDINATOR = (10, 4)
DESCRIBE_ACLS = (29, 3)
DESCRIBE_SCRAM = (50, 0)
DESCRIBE_LOG_DIRS = (35, 4)

EARLIEST = -2
LATEST = -1


def entity(api: tuple[int, int], name: str, /, **fields: Any) -> Any:
    """A request's nested entity ``name`` (e.g. ``ListOffsetsTopic``) of the API version."""
    return build(getattr(request_module(*api), name), **fields)


def error_name(code: int) -> str:
    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"ERROR_{int(code)}"


def status_of(code: int) -> int:
    """The HTTP status of a Kafka error code (docs/console.md)."""
    name = error_name(code)
    if name.endswith("_AUTHORIZATION_FAILED"):
        return 403
    if name in ("UNKNOWN_TOPIC_OR_PARTITION", "GROUP_ID_NOT_FOUND", "UNKNOWN_TOPIC_ID",
                "RESOURCE_NOT_FOUND"):
        return 404
    if name in ("TOPIC_ALREADY_EXISTS", "NON_EMPTY_GROUP"):
        return 409
    if name.startswith("INVALID_") or name in ("POLICY_VIOLATION", "UNSUPPORTED_VERSION",
                                               "TOPIC_DELETION_DISABLED", "SECURITY_DISABLED"):
        return 400
    try:
        retriable = bool(ErrorCode(int(code)).retriable)
    except ValueError:
        retriable = False
    return 503 if retriable else 400


class KafkaError(HttpError):
    """A Kafka error code answered by a broker, as the console's JSON error."""

    def __init__(self, code: int, message: str | None, what: str) -> None:
        name = error_name(code)
        text = f"{what}: {message}" if message else f"{what}: {name}"
        super().__init__(status_of(code), name, text)
        self.code = int(code)


def check(code: Any, message: str | None, what: str) -> None:
    if int(code):
        raise KafkaError(int(code), message, what)


class SharedMetadata:
    """The last Metadata of every topic per principal, shared by that principal's
    sessions: the answer depends only on who asks (the console's connections all come
    from this broker's own address), and with 10,000 partitions one costs the broker
    tens of milliseconds of its event loop, so several open consoles cost one."""

    MAX_PRINCIPALS = 1024

    def __init__(self) -> None:
        self._entries: dict[str | None, tuple[float, Any]] = {}
        self._locks: dict[str | None, asyncio.Lock] = {}

    def lock(self, principal: str | None) -> asyncio.Lock:
        if len(self._locks) > self.MAX_PRINCIPALS:
            self._locks = {k: v for k, v in self._locks.items() if v.locked()}
        return self._locks.setdefault(principal, asyncio.Lock())

    def get(self, principal: str | None, now: float) -> Any:
        entry = self._entries.get(principal)
        if entry is None or now - entry[0] >= METADATA_TTL:
            return None
        return entry[1]

    def put(self, principal: str | None, at: float, response: Any) -> None:
        if len(self._entries) > self.MAX_PRINCIPALS:
            self._entries.clear()
        self._entries[principal] = (at, response)

    def forget(self, principal: str | None) -> None:
        self._entries.pop(principal, None)


class KafkaSession:
    """One console session's connections, as its principal."""

    def __init__(
        self,
        bootstrap: tuple[str, int],
        security: ClientSecurity | None,
        timeout: float,
        max_connections: int,
        client_id: str = "chronik-console",
        clock: Callable[[], float] = time.monotonic,
        principal: str | None = None,
        shared: SharedMetadata | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout = timeout
        self.max_connections = max(1, max_connections)
        self.client_id = client_id
        self._clock = clock
        self._clients: OrderedDict[int, BrokerClient] = OrderedDict()
        self._addresses: dict[int, tuple[str, int]] = {}
        self.principal = principal
        self._shared = shared if shared is not None else SharedMetadata()
        # Figures a page keeps for a while (overview's disk use), by name: (time, value).
        self.cache: dict[str, tuple[float, Any]] = {}
        self.closed = False

    # -- connections ----------------------------------------------------------------------
    def _client(self, node: int) -> BrokerClient:
        if self.closed:
            raise HttpError(401, "unauthorized", "the session has ended")
        client = self._clients.get(node)
        if client is not None:
            self._clients.move_to_end(node)
            return client
        if node == BOOTSTRAP:
            host, port = self.bootstrap
        else:
            address = self._addresses.get(node)
            if address is None:
                raise HttpError(503, "broker_unavailable", f"broker {node} is not known")
            host, port = address
        while len(self._clients) >= self.max_connections:
            _, oldest = self._clients.popitem(last=False)
            oldest.close()
        client = BrokerClient(host, port, self.client_id, self.timeout, self.security)
        self._clients[node] = client
        return client

    async def send(self, api: tuple[int, int], node: int = BOOTSTRAP, **fields: Any) -> Any:
        """One request to a broker (this one by default); its decoded response. 503 when
        the broker does not answer within the session's timeout."""
        request = build(_request_class(*api), **fields)
        client = self._client(node)
        try:
            async with asyncio.timeout(self.timeout + 1):
                return await client.request(request, self.timeout)
        except asyncio.CancelledError:
            # Cut off mid-exchange (the API call's own deadline): the connection may hold
            # an answer nobody reads, so it is not used again.
            client.close()
            self._clients.pop(node, None)
            raise
        except AuthenticationRefused:
            # The credentials checked at login no longer hold (changed or deleted).
            self.close()
            raise HttpError(
                401, "unauthorized", "the broker refused this session's credentials: log in again"
            ) from None
        except (BrokerUnreachable, TimeoutError) as exc:
            client.close()
            self._clients.pop(node, None)
            where = "this broker" if node == BOOTSTRAP else f"broker {node}"
            raise HttpError(503, "broker_unavailable", f"{where} did not answer: {exc}") from None

    def close(self) -> None:
        self.closed = True
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    @property
    def connections(self) -> int:
        return len(self._clients)

    # -- metadata -------------------------------------------------------------------------
    async def metadata(self, fresh: bool = False) -> Any:
        """Metadata of every topic the principal may describe (kept METADATA_TTL s for
        all of the principal's sessions)."""
        async with self._shared.lock(self.principal):
            if not fresh:
                cached = self._shared.get(self.principal, self._clock())
                if cached is not None:
                    # Another session fetched it: this one learns the brokers' addresses.
                    self._learn(cached)
                    return cached
            response = await self.send(
                METADATA, topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            self._learn(response)
            self._shared.put(self.principal, self._clock(), response)
            return response

    async def brokers(self) -> Any:
        """Metadata without topics: the brokers, the controller and the cluster id, cheap
        however many partitions the cluster has."""
        response = await self.send(
            METADATA, topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        self._learn(response)
        return response

    async def leaders_of(self, topics: set[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader of some topics (their Metadata only); topics the
        principal may not describe, or gone, are left out."""
        if not topics:
            return {}
        response = await self.send(
            METADATA,
            topics=tuple(entity(METADATA, "MetadataRequestTopic", name=t, topic_id=None)
                         for t in sorted(topics)),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        self._learn(response)
        out: dict[tuple[str, int], int] = {}
        for topic in response.topics:
            if not int(topic.error_code):
                out.update(leaders(topic))
        return out

    async def topic_metadata(self, name: str) -> Any:
        """Metadata of one topic (404 when unknown or not visible to the principal)."""
        response = await self.send(
            METADATA,
            topics=(entity(METADATA, "MetadataRequestTopic", name=name, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        self._learn(response)
        for topic in response.topics:
            if topic.name == name:
                check(topic.error_code, None, f"topic {name!r}")
                return topic
        raise KafkaError(int(ErrorCode.unknown_topic_or_partition), None, f"topic {name!r}")

    def _learn(self, response: Any) -> None:
        for broker in response.brokers:
            self._addresses[int(broker.node_id)] = (broker.host, int(broker.port))

    def forget_metadata(self) -> None:
        self._shared.forget(self.principal)

    async def node_of_coordinator(self, group: str) -> int:
        nodes = await self.coordinators([group])
        return nodes[group]

    async def coordinators(self, groups: list[str]) -> dict[str, int]:
        """The coordinator's node id of each group (FindCoordinator v4, one request)."""
        if not groups:
            return {}
        response = await self.send(FIND_COORDINATOR, key_type=0, coordinator_keys=tuple(groups))
        out: dict[str, int] = {}
        for c in response.coordinators:
            check(c.error_code, c.error_message, f"coordinator of group {c.key!r}")
            self._addresses[int(c.node_id)] = (c.host, int(c.port))
            out[c.key] = int(c.node_id)
        return out

    async def list_offsets(
        self, partitions: dict[tuple[str, int], int], spec: int | dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], int]:
        """ListOffsets of ``partitions`` (topic, partition) -> leader; ``spec`` EARLIEST,
        LATEST or a timestamp per partition. -1 where a timestamp finds nothing; a
        partition without a leader or with an error is left out."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for (topic, index), leader in partitions.items():
            if leader >= 0:
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(index)

        async def ask(leader: int, topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
            body = tuple(
                entity(LIST_OFFSETS, "ListOffsetsTopic", name=t, partitions=tuple(
                    entity(LIST_OFFSETS, "ListOffsetsPartition", partition_index=p,
                           current_leader_epoch=-1,
                           timestamp=spec if isinstance(spec, int) else spec[(t, p)])
                    for p in ps))
                for t, ps in topics.items()
            )
            response = await self.send(LIST_OFFSETS, leader, replica_id=-1, isolation_level=0,
                                       topics=body)
            found = {}
            for t in response.topics:
                for p in t.partitions:
                    if int(p.error_code) == 0:
                        found[(t.name, int(p.partition_index))] = int(p.offset)
                    elif error_name(p.error_code).endswith("_AUTHORIZATION_FAILED"):
                        check(p.error_code, None, f"offsets of {t.name}-{p.partition_index}")
            return found

        async def ask_in_turns(
            leader: int, topics: dict[str, list[int]]
        ) -> dict[tuple[str, int], int]:
            found: dict[tuple[str, int], int] = {}
            for part in chunks(topics):
                found.update(await ask(leader, part))
            return found

        answers = await asyncio.gather(*(ask_in_turns(n, ts) for n, ts in by_leader.items()))
        out: dict[tuple[str, int], int] = {}
        for answer in answers:
            out.update(answer)
        return out


def chunks(topics: dict[str, list[int]], size: int = MAX_PARTITIONS_PER_REQUEST
           ) -> list[dict[str, list[int]]]:
    """``topics``' partitions cut into requests of at most ``size`` partitions, sent to a
    broker one after the other: the console builds each and the broker answers each in a
    short turn of its event loop, its other clients' requests served between them, where
    one request (or many sent at once) for thousands of partitions would hold them up."""
    out: list[dict[str, list[int]]] = []
    current: dict[str, list[int]] = {}
    count = 0
    for topic, partitions in topics.items():
        for index in partitions:
            if count >= size:
                out.append(current)
                current, count = {}, 0
            current.setdefault(topic, []).append(index)
            count += 1
    if current:
        out.append(current)
    return out


@cache
def _request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


def leaders(topic: Any) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader id of one topic's metadata."""
    return {(topic.name, int(p.partition_index)): int(p.leader_id) for p in topic.partitions}
