"""The console's settings (broker settings ``console.*``, docs/configuration.md) and the
listener its Kafka connections use.

``console.enable`` defaults to true only when the HTTP listener's host is a loopback
address (127.0.0.0/8, ::1, localhost): a console reachable from the network is switched
on explicitly. ``console.listener`` names the listener the console connects to (default:
the first SASL listener when the broker is secured, else the first listener).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from chronik.security.listeners import ListenerSpec

DEFAULTS = {
    "console.session.timeout.ms": str(30 * 60 * 1000),
    "console.max.sessions": "64",
    "console.max.connections.per.session": "8",
    "console.request.timeout.ms": "10000",
    "console.messages.max.bytes": str(10 * 1024 * 1024),
}


class ConsoleConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ConsoleSettings:
    enabled: bool
    explicit: bool  # console.enable was set (a console that cannot start is then an error)
    listener: str | None
    session_timeout: float
    max_sessions: int
    max_connections: int
    request_timeout: float
    messages_max_bytes: int

    @classmethod
    def from_values(cls, values: Mapping[str, str], http_host: str) -> ConsoleSettings:
        merged = {**DEFAULTS, **values}
        text = str(merged.get("console.enable", "")).strip().lower()
        if text in ("", "default"):
            enabled, explicit = is_loopback(http_host), False
        elif text in ("true", "false"):
            enabled, explicit = text == "true", True
        else:
            raise ConsoleConfigError(f"console.enable must be true or false, got {text!r}")
        listener = str(merged.get("console.listener", "")).strip().upper() or None
        return cls(
            enabled,
            explicit,
            listener,
            _int(merged, "console.session.timeout.ms", 1000) / 1000,
            _int(merged, "console.max.sessions", 1),
            _int(merged, "console.max.connections.per.session", 1),
            _int(merged, "console.request.timeout.ms", 100) / 1000,
            _int(merged, "console.messages.max.bytes", 1024),
        )


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _int(values: Mapping[str, str], key: str, low: int) -> int:
    try:
        value = int(str(values[key]).strip())
    except ValueError:
        raise ConsoleConfigError(f"{key} must be an integer, got {values[key]!r}") from None
    if value < low:
        raise ConsoleConfigError(f"{key} must be at least {low}, got {value}")
    return value


def console_listener(
    listeners: list[ListenerSpec], secured: bool, name: str | None
) -> ListenerSpec:
    """The listener the console's Kafka connections use; ConsoleConfigError when none
    fits (a secured broker needs one that takes SASL: the console logs in as its user)."""
    if name is not None:
        found = [s for s in listeners if s.name == name]
        if not found:
            raise ConsoleConfigError(f"console.listener {name} is not one of the listeners")
        spec = found[0]
        if secured and not spec.sasl:
            raise ConsoleConfigError(
                f"console.listener {name} does not take SASL: a secured broker's console "
                "needs a SASL listener to log in as its users"
            )
        return spec
    if secured:
        sasl = [s for s in listeners if s.sasl]
        if not sasl:
            raise ConsoleConfigError(
                "the broker is secured (an authorizer) but no listener takes SASL: the "
                "console needs one to log in as its users (or set console.enable=false)"
            )
        return sasl[0]
    return listeners[0]


def connect_address(spec: ListenerSpec) -> tuple[str, int]:
    """Where the console reaches its own broker on ``spec``: the bound address, or the
    advertised one when the listener binds every address."""
    if spec.host in ("", "0.0.0.0", "::"):
        return spec.advertised()
    return spec.host, spec.port
