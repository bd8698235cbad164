"""Kafka's listener settings: where a broker accepts connections, and how each is secured.

    listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093
    advertised.listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://broker1.example:9093
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
    inter.broker.listener.name=PLAINTEXT

A listener's name is looked up in the map for its security protocol (so a listener may be
called INTERNAL and be SASL_SSL). An empty host binds every address; port 0 takes a free
port. The advertised endpoint of a listener defaults to its bound one.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}


class ListenerError(ValueError):
    pass


@dataclass
class ListenerSpec:
    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def advertised(self) -> tuple[str, int]:
        """The host and port clients are told to use for this listener."""
        host = self.advertised_host
        if not host:
            host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        port = self.advertised_port if self.advertised_port else self.port
        return host, port


def parse_protocol_map(text: str | None) -> dict[str, str]:
    if not text:
        return dict(DEFAULT_PROTOCOL_MAP)
    mapping: dict[str, str] = {}
    for entry in text.split(","):
        name, sep, protocol = entry.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {entry.strip()!r} is not NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        mapping[name] = protocol
    return mapping


def _endpoints(text: str, key: str) -> list[tuple[str, str, int]]:
    endpoints: list[tuple[str, str, int]] = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, rest = entry.partition("://")
        host, colon, port_text = rest.rpartition(":")
        if not sep or not colon or not name:
            raise ListenerError(f"{key}: {entry!r} is not NAME://HOST:PORT")
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            raise ListenerError(f"{key}: {entry!r} has no numeric port") from None
        if not 0 <= port <= 65535:
            raise ListenerError(f"{key}: port {port} is out of range")
        endpoints.append((name.upper(), host, port))
    names = [n for n, _, _ in endpoints]
    if len(set(names)) != len(names):
        raise ListenerError(f"{key}: each listener name may appear once")
    return endpoints


def parse_listeners(
    listeners: str,
    advertised: str | None = None,
    protocol_map: str | None = None,
    skip: str = "",
) -> list[ListenerSpec]:
    """The listeners to serve; those named in ``skip`` (Kafka's controller.listener.names,
    a KRaft quorum's own) are left out."""
    mapping = parse_protocol_map(protocol_map)
    skipped = {n.strip().upper() for n in skip.split(",") if n.strip()}
    specs: list[ListenerSpec] = []
    for name, host, port in _endpoints(listeners, "listeners"):
        if name in skipped:
            continue
        if name not in mapping:
            raise ListenerError(
                f"listeners: {name} is not in listener.security.protocol.map"
            )
        specs.append(ListenerSpec(name, mapping[name], host, port))
    if not specs:
        raise ListenerError("listeners: no listener given")
    by_name = {s.name: s for s in specs}
    for name, host, port in _endpoints(advertised or "", "advertised.listeners"):
        if name in skipped:
            continue
        spec = by_name.get(name)
        if spec is None:
            raise ListenerError(f"advertised.listeners: {name} is not in listeners")
        if host in ("", "0.0.0.0", "::"):
            raise ListenerError(f"advertised.listeners: {name} needs a host clients can reach")
        spec.advertised_host, spec.advertised_port = host, port
    return specs
