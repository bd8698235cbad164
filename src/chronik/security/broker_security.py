"""A broker's security settings in one place: its listeners, their TLS contexts, the SASL
mechanisms and credentials, what a failed authentication costs its client, and how it
connects to the other brokers of its cluster (ClientSecurity).

Between brokers, with Kafka's settings: the inter-broker listener
(`inter.broker.listener.name`, or `security.inter.broker.protocol` naming a listener
after its protocol) decides TLS and SASL; TLS checks the other broker against the trust
store and presents this broker's key store certificate, with the host name checked as
`ssl.endpoint.identification.algorithm` says; SASL uses
`sasl.mechanism.inter.broker.protocol` with the username and password of
`listener.name.<listener>.<mechanism>.sasl.jaas.config` (lowercased names) or
`sasl.jaas.config`.

Re-authentication (KIP-368): `connections.max.reauth.ms`, or for one listener and
mechanism `listener.name.<listener>.<mechanism>.connections.max.reauth.ms`, is the
lifetime of an authenticated session; 0 (the default) means none."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chronik.security.credentials import CredentialStore, SharedCredentials
from chronik.security.listeners import ListenerError, ListenerSpec, parse_listeners
from chronik.security.principal import ANONYMOUS, PrincipalMapper
from chronik.security.sasl import SUPPORTED, SaslSession
from chronik.security.sasl_client import Credentials, JaasError, jaas_credentials
from chronik.security.tls import TlsSettings, client_context, server_context, subject_name

log = logging.getLogger("chronik.security")

# Kafka's names and defaults.
DEFAULTS = {
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "connection.failed.authentication.delay.ms": "100",
    "sasl.server.max.receive.size": "524288",
    "connections.max.reauth.ms": "0",
}
REAUTH_KEY = "connections.max.reauth.ms"
LISTENER_REAUTH_KEY = re.compile(
    r"listener\.name\.([^.]+)\.(.+)\.connections\.max\.reauth\.ms", re.IGNORECASE
)
# Read here; other ssl.* and sasl.* keys are reported as having no effect.
KEYS = (
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol",
    "sasl.jaas.config",
    "ssl.endpoint.identification.algorithm",
    *DEFAULTS,
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
    "ssl.principal.mapping.rules",
)
# Repeated failures from one address wait longer each time, up to this, and are
# forgotten after FAILURE_MEMORY_SECONDS without one; at most FAILURE_HOSTS addresses
# are remembered.
MAX_FAILURE_DELAY_SECONDS = 5.0
FAILURE_MEMORY_SECONDS = 60.0
FAILURE_HOSTS = 10_000
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class ClientSecurity:
    """How this broker connects to the others: the inter-broker listener's protocol, a
    TLS client context (SSL, SASL_SSL; replaced when the stores are reloaded) and the
    SASL mechanism and credentials (SASL_PLAINTEXT, SASL_SSL)."""

    listener: str
    protocol: str
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    credentials: Credentials | None = None


class BrokerSecurity:
    def __init__(
        self,
        values: Mapping[str, str],
        data_dir: Path,
        host: str,
        port: int,
        advertised_host: str | None = None,
        clustered: bool = False,
    ) -> None:
        settings = {**DEFAULTS, **values}
        listeners = settings.get("listeners", "").strip()
        if listeners:
            self.listeners = parse_listeners(
                listeners,
                settings.get("advertised.listeners"),
                settings.get("listener.security.protocol.map"),
                skip=settings.get("controller.listener.names", ""),
            )
        else:
            self.listeners = [ListenerSpec("PLAINTEXT", "PLAINTEXT", host, port, advertised_host)]
        names = [s.name for s in self.listeners]
        inter = settings.get("inter.broker.listener.name", "").strip().upper()
        inter_protocol = settings.get("security.inter.broker.protocol", "").strip().upper()
        if inter and inter_protocol:
            raise ListenerError(
                "set inter.broker.listener.name or security.inter.broker.protocol, not both"
            )
        if inter_protocol:
            if inter_protocol not in PROTOCOLS:
                raise ListenerError(
                    f"security.inter.broker.protocol {inter_protocol} is not one of "
                    f"{', '.join(PROTOCOLS)}"
                )
            if inter_protocol not in names:
                raise ListenerError(
                    f"security.inter.broker.protocol {inter_protocol}: no listener is named "
                    f"{inter_protocol} (or set inter.broker.listener.name)"
                )
            inter = inter_protocol
        if not inter:
            inter = "PLAINTEXT" if "PLAINTEXT" in names else names[0]
        if inter not in names:
            raise ListenerError(f"inter.broker.listener.name {inter} is not in listeners")
        self.inter_broker = next(s for s in self.listeners if s.name == inter)
        mechanisms = tuple(
            m.strip().upper() for m in settings["sasl.enabled.mechanisms"].split(",") if m.strip()
        )
        unknown = [m for m in mechanisms if m not in SUPPORTED]
        if unknown:
            raise ListenerError(
                f"sasl.enabled.mechanisms: {', '.join(unknown)} not served "
                f"(served: {', '.join(SUPPORTED)})"
            )
        if not mechanisms and any(s.sasl for s in self.listeners):
            raise ListenerError("sasl.enabled.mechanisms is empty but a listener is SASL")
        self.mechanisms = mechanisms
        self.failed_delay = int(settings["connection.failed.authentication.delay.ms"]) / 1000
        self.sasl_max_receive_size = int(settings["sasl.server.max.receive.size"])
        self.reauth_ms = _reauth_ms(settings[REAUTH_KEY], REAUTH_KEY)
        # (listener, mechanism) -> ms, from the listener.name.* keys (names uppercased).
        self.listener_reauth_ms: dict[tuple[str, str], int] = {}
        for key, value in settings.items():
            match = LISTENER_REAUTH_KEY.fullmatch(key)
            if match:
                where = (match.group(1).upper(), match.group(2).upper())
                self.listener_reauth_ms[where] = _reauth_ms(value, key)
        self.data_dir = Path(data_dir)
        self._store: CredentialStore | SharedCredentials | None = None
        self.tls_settings = TlsSettings.from_config(settings)
        self.tls: ssl.SSLContext | None = None
        if any(s.tls for s in self.listeners):
            self.tls = server_context(self.tls_settings)
        self.principals = PrincipalMapper(settings.get("ssl.principal.mapping.rules"))
        # Only a cluster's brokers connect to each other.
        self.client: ClientSecurity | None = (
            self._client_security(settings) if clustered else None
        )
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        # (mechanism, "success" | "failure") -> count, for the metrics: authentications
        # and re-authentications apart; and connections closed for an expired session.
        self.outcomes: dict[tuple[str, str], int] = {}
        self.reauth_outcomes: dict[tuple[str, str], int] = {}
        self.expired_closed = 0

    def _client_security(self, settings: Mapping[str, str]) -> ClientSecurity:
        spec = self.inter_broker
        client = ClientSecurity(spec.name, spec.protocol)
        if spec.tls:
            client.tls = client_context(self.tls_settings)
        if not spec.sasl:
            return client
        key = "sasl.mechanism.inter.broker.protocol"
        mechanism = settings.get(key, "").strip().upper()
        if not mechanism:
            raise ListenerError(
                f"{key} is not set (Kafka's default GSSAPI is not served): the {spec.name} "
                f"listener between brokers needs one of {', '.join(self.mechanisms)}"
            )
        if mechanism not in self.mechanisms:
            raise ListenerError(
                f"{key} {mechanism} is not in sasl.enabled.mechanisms "
                f"({', '.join(self.mechanisms)})"
            )
        keys = (
            f"listener.name.{spec.name.lower()}.{mechanism.lower()}.sasl.jaas.config",
            "sasl.jaas.config",
        )
        key = next((k for k in keys if settings.get(k, "").strip()), "")
        if not key:
            raise ListenerError(
                f"{keys[0]} (or sasl.jaas.config) is not set: brokers need a username and "
                f"password to authenticate to each other with {mechanism} on {spec.name}"
            )
        try:
            client.credentials = jaas_credentials(settings[key].strip(), mechanism)
        except JaasError as exc:
            raise ListenerError(f"{key} {exc}") from None
        client.mechanism = mechanism
        return client

    def _count(self, session: SaslSession, outcome: str) -> None:
        key = (session.mechanism or "none", outcome)
        counts = self.reauth_outcomes if session.reauthentication else self.outcomes
        counts[key] = counts.get(key, 0) + 1

    def authenticated(self, session: SaslSession) -> None:
        self._count(session, "success")

    def session_lifetimes(self, listener: str | None) -> dict[str, int]:
        """The session lifetime in ms of each mechanism on ``listener``: its own
        setting, else `connections.max.reauth.ms` (Kafka's per-listener override)."""
        name = (listener or "").upper()
        return {m: self.listener_reauth_ms.get((name, m), self.reauth_ms) for m in self.mechanisms}

    def session_expired(self, peer: str, session: SaslSession, api_key: int) -> None:
        """A request on a connection whose session expired: one line, then it closes."""
        self.expired_closed += 1
        late = 0.0 if session.expires_at is None else time.monotonic() - session.expires_at
        log.info(
            "closing connection from %s: SASL session of User:%s expired %d ms ago without "
            "re-authentication (connections.max.reauth.ms %d); API %d not served",
            peer,
            session.user,
            late * 1000,
            session.lifetime_ms,
            api_key,
        )

    @property
    def store(self) -> CredentialStore | SharedCredentials:
        """A single node's credentials file, or the cluster's shared credentials once
        `share_credentials` was called."""
        if self._store is None:
            self._store = CredentialStore(self.data_dir)
        return self._store

    def share_credentials(self, shared: SharedCredentials) -> None:
        self._store = shared

    def endpoint(self, listener: str) -> tuple[str, int]:
        """Where clients of ``listener`` are told to connect to this broker."""
        for spec in self.listeners:
            if spec.name == listener:
                return spec.advertised()
        return self.inter_broker.advertised()

    def endpoints(self) -> list[tuple[str, str, int]]:
        return [(s.name, *s.advertised()) for s in self.listeners]

    def tls_principal(self, peercert: dict[str, Any] | None) -> str:
        """A TLS connection's principal: its client certificate's mapped subject, or
        ANONYMOUS without one. Raises PrincipalRuleError when no rule matches."""
        subject = subject_name(peercert)
        return ANONYMOUS if subject is None else self.principals.from_subject(subject)

    def sasl_session(self, listener: str | None = None) -> SaslSession:
        return SaslSession(self.mechanisms, self.store, self.session_lifetimes(listener))

    def reload_tls(self) -> bool:
        """Build the TLS context anew from the settings' files; whether it was (a store
        that no longer loads leaves the old context in use)."""
        if self.tls is None:
            return False
        try:
            tls = server_context(self.tls_settings)
            if self.client is not None and self.client.tls is not None:
                self.client.tls = client_context(self.tls_settings)
            self.tls = tls
        except (ValueError, OSError) as exc:
            log.error("TLS key or trust store not reloaded, the old ones stay: %s", exc)
            return False
        log.info("TLS key and trust stores reloaded")
        return True

    async def authentication_failed(self, host: str, session: SaslSession, reason: str) -> None:
        """One log line (the address and reason, never a secret), then a wait that
        grows with the address's recent failures, as Kafka's
        connection.failed.authentication.delay.ms, before the client hears of it."""
        self._count(session, "failure")
        count = self._failed_again(host)
        if session.reauthentication:
            log.warning(
                "failed re-authentication of User:%s from %s with %s (%d in a row): %s",
                session.user,
                host,
                session.mechanism,
                count,
                reason,
            )
        else:
            log.warning(
                "failed authentication from %s with %s (%d in a row): %s",
                host,
                session.mechanism,
                count,
                reason,
            )
        await self._failure_wait(count)

    async def http_authentication_failed(self, host: str, user: str) -> None:
        """A wrong HTTP Basic password: logged and slowed down as a failed SASL login,
        the same address's failures counting together."""
        count = self._failed_again(host)
        log.warning(
            "failed HTTP authentication of %r from %s (%d in a row)", user[:100], host, count
        )
        await self._failure_wait(count)

    def _failed_again(self, host: str) -> int:
        """Count one more failure from the address; how many in a row it has now."""
        now = time.monotonic()
        count, last = self._failures.pop(host, (0, now))
        if now - last > FAILURE_MEMORY_SECONDS:
            count = 0
        count += 1
        self._failures[host] = (count, now)
        while len(self._failures) > FAILURE_HOSTS:
            self._failures.popitem(last=False)
        return count

    async def _failure_wait(self, count: int) -> None:
        delay = min(self.failed_delay * 2 ** min(count - 1, 16), MAX_FAILURE_DELAY_SECONDS)
        if delay > 0:
            await asyncio.sleep(delay)


def _reauth_ms(value: str, key: str) -> int:
    try:
        ms = int(value.strip())
    except ValueError:
        raise ListenerError(f"{key} must be a number of milliseconds, got {value!r}") from None
    if ms < 0:
        raise ListenerError(f"{key} must be 0 (no re-authentication) or more, got {ms}")
    return ms
