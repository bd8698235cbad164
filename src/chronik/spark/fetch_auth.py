# TLS and SASL for the Fetch reader's own connection, from librdkafka's settings (the
# `kafka.*` options; Java's names were translated by then).
#
# Wire format after ApiVersions (big-endian, Kafka's SaslHandshake.json v1 and
# SaslAuthenticate.json v0):
#   SaslHandshake    request  = int32 size, int16 api_key (17), int16 version (1),
#                               int32 correlation_id, string client_id, string mechanism
#                    response = int32 size, int32 correlation_id, int16 error_code,
#                               [string mechanism]
#   SaslAuthenticate request  = int32 size, int16 api_key (36), int16 version (0),
#                               int32 correlation_id, string client_id, bytes auth_bytes
#                    response = int32 size, int32 correlation_id, int16 error_code,
#                               nullable string error_message, bytes auth_bytes
# PLAIN sends one token; SCRAM two, and checks the server's signature.
from __future__ import annotations

import ssl
import struct
from collections.abc import Callable, Mapping

from chronik.security.client_settings import PASSED_THROUGH
from chronik.security.scram import MECHANISMS, ScramClient, ScramError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISM_NAMES = ("PLAIN", *MECHANISMS)
# The security settings this path understands; any other sasl.* or ssl.* key (a PKCS12
# key store, OAUTHBEARER, ...) leaves the reading to librdkafka.
KEYS = (frozenset(PASSED_THROUGH) - {"client.id", "ssl.cipher.suites"}) | {"ssl.ca.pem"}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class AuthenticationError(Exception):
    """The broker refused the credentials, or the exchange went wrong."""


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


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def authenticate(
    conf: Mapping[str, str],
    request: Callable[[int, int, bytes], memoryview],
) -> None:
    """SASL on a connection whose ``request(api_key, version, body)`` sends one request
    and returns its response after the correlation id."""
    if not protocol(conf).startswith("sasl"):
        return
    mech = mechanism(conf)
    try:
        answer = request(SASL_HANDSHAKE, 1, _string(mech))
        (error,) = _I16.unpack_from(answer, 0)
    except struct.error as exc:
        raise AuthenticationError(f"unreadable SaslHandshake response: {exc}") from None
    if error:
        raise AuthenticationError(f"the broker does not take SASL mechanism {mech} ({error})")
    user, password = conf.get("sasl.username", ""), conf.get("sasl.password", "")

    def exchange(token: bytes) -> bytes:
        answer = request(SASL_AUTHENTICATE, 0, _I32.pack(len(token)) + token)
        try:
            (error,) = _I16.unpack_from(answer, 0)
            (size,) = _I16.unpack_from(answer, 2)
            message = bytes(answer[4 : 4 + max(size, 0)]).decode("utf-8", "replace")
            pos = 4 + max(size, 0)
            (length,) = _I32.unpack_from(answer, pos)
            reply = bytes(answer[pos + 4 : pos + 4 + max(length, 0)])
        except struct.error as exc:
            raise AuthenticationError(f"unreadable SaslAuthenticate response: {exc}") from None
        if error:
            raise AuthenticationError(f"SASL authentication failed: {message or error}")
        return reply

    if mech == "PLAIN":
        exchange(b"\0" + user.encode() + b"\0" + password.encode())
        return
    client = ScramClient(mech, user, password)
    try:
        client.verify(exchange(client.final(exchange(client.first()))))
    except ScramError as exc:
        raise AuthenticationError(str(exc)) from None
