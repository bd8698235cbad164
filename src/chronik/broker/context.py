"""What a request handler knows about the request it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chronik.protocol import compat

if TYPE_CHECKING:
    from chronik.broker.server import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
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

    @property
    def response_module(self) -> Any:
        return compat.response_module(self.api_key, self.api_version)

    def schema(self, name: str) -> type:
        """A class of this API's response schema at the request's version."""
        return getattr(self.response_module, name)

    def build(self, name: str, /, **fields: Any) -> Any:
        return compat.build(self.schema(name), **fields)
