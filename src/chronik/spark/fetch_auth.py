# TLS and SASL for the Fetch reader's own connection, from librdkafka's settings (the
# `kafka.*` options; Java's names were translated by then). The SASL exchange itself is
# chronik.security.sasl_client's, shared with the brokers' own connections.
from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping

from chronik.security.client_settings import PASSED_THROUGH
from chronik.security.sasl_client import (
    MECHANISM_NAMES,
    AuthenticationError,
    Credentials,
    exchange,
)

__all__ = ["AuthenticationError", "authenticate", "mechanism", "protocol", "servable",
           "tls_context"]

PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
# The security settings this path understands; any other sasl.* or ssl.* key (a PKCS12
# key store, OAUTHBEARER, ...) leaves the reading to librdkafka.
KEYS = (frozenset(PASSED_THROUGH) - {"client.id", "ssl.cipher.suites"}) | {"ssl.ca.pem"}


def protocol(conf: Mapping[str, str]) -> str:
    return conf.get("security.protocol", "plaintext").strip().lower()


def mechanism(conf: Mapping[str, str]) -> str:
    return (conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").strip().upper()


def servable(conf: Mapping[str, str]) -> bool:
    """Whether this path can connect as ``conf`` asks."""
    if protocol(conf) not in PROTOCOLS:
        return False
    if any(k.startswith(("sasl.", "ssl.")) and k not in KEYS for k in conf):
        return False
    return not protocol(conf).startswith("sasl") or mechanism(conf) in MECHANISM_NAMES


def tls_context(conf: Mapping[str, str]) -> ssl.SSLContext | None:
    if protocol(conf) not in ("ssl", "sasl_ssl"):
        return None
    context = ssl.create_default_context(
        cafile=conf.get("ssl.ca.location") or None, cadata=conf.get("ssl.ca.pem") or None
    )
    if conf.get("ssl.certificate.location"):
        context.load_cert_chain(
            conf["ssl.certificate.location"],
            conf.get("ssl.key.location") or None,
            conf.get("ssl.key.password") or None,
        )
    verify = conf.get("enable.ssl.certificate.verification", "true").strip().lower() != "false"
    identify = conf.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    context.check_hostname = verify and identify == "https"
    if not verify:
        context.verify_mode = ssl.CERT_NONE
    return context


def authenticate(
    conf: Mapping[str, str],
    request: Callable[[int, int, bytes], memoryview],
) -> None:
    """SASL on a connection whose ``request(api_key, version, body)`` sends one request
    and returns its response after the correlation id."""
    if not protocol(conf).startswith("sasl"):
        return
    credentials = Credentials(conf.get("sasl.username", ""), conf.get("sasl.password", ""))
    steps = exchange(mechanism(conf), credentials)
    try:
        api_key, version, body = next(steps)
        while True:
            api_key, version, body = steps.send(bytes(request(api_key, version, body)))
    except StopIteration:
        return
