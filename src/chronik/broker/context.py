"""What a request handler knows about the request it serves."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chronik.protocol import compat
from chronik.security.acl_model import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from chronik.broker.services import Services


class Throttle:
    """A connection's quota throttle (KIP-219): until ``until`` (monotonic seconds) no
    further request is read from it."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def add(self, throttle_ms: int) -> None:
        self.until = max(self.until, time.monotonic() + throttle_ms / 1000)

    def remaining(self) -> float:
        return self.until - time.monotonic()


@dataclass(slots=True)
class RequestContext:
    services: Services
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    # The connection's SASL state (a SaslSession) on a SASL listener, else None.
    sasl: Any = None
    # The listener the request came in on, by name (Kafka's listener name).
    listener: str = "PLAINTEXT"
    # Who sent it (Kafka's principal): User:NAME after SASL, User:<certificate subject>
    # with a TLS client certificate, else User:ANONYMOUS.
    principal: str = "User:ANONYMOUS"
    # The request's size in bytes, header and body (Kafka's request.sizeInBytes): what a
    # Produce counts against its quota.
    size: int = 0
    # The connection's quota throttle (KIP-219); None outside a connection.
    throttled: Throttle | None = None
    # Whether the connection sends a response's file regions with sendfile (plaintext):
    # then a Fetch names record bytes (chronik.storage.file_region) instead of reading them.
    sendfile: bool = False

    @property
    def response_module(self) -> Any:
        return compat.response_module(self.api_key, self.api_version)

    def schema(self, name: str) -> type:
        """A class of this API's response schema at the request's version."""
        return getattr(self.response_module, name)

    def build(self, name: str, /, **fields: Any) -> Any:
        return compat.build(self.schema(name), **fields)

    def throttle(self, throttle_ms: int) -> None:
        """Hold the connection for ``throttle_ms`` (a quota was exceeded)."""
        if throttle_ms > 0 and self.throttled is not None:
            self.throttled.add(throttle_ms)

    async def wait_throttled(self) -> None:
        """Wait out the connection's throttle: a request read before it began is not
        worked on meanwhile, as Kafka, which reads one request of a connection at a time,
        would not have read it yet."""
        if self.throttled is not None:
            delay = self.throttled.remaining()
            if delay > 0:
                await asyncio.sleep(delay)

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the request's principal may do this (always, without an authorizer)."""
        return self.services.authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name
        )

    def allowed_on_cluster(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_on_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type allows the operation."""
        return self.services.authorizer.authorize_any(
            self.principal, self.client_host, operation, resource_type
        )

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit set for the resource."""
        return self.services.authorizer.operations(
            self.principal, self.client_host, resource_type, name
        )
