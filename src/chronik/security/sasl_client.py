"""The client's side of Kafka's SASL exchange, without I/O, for every connection chronik
makes itself (a broker to another broker, the Spark source's Fetch reader), and Kafka's
JAAS form for the credentials.

    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="broker" password="broker-secret";

Wire format (big-endian, Kafka's SaslHandshake.json v1 and SaslAuthenticate.json v0):
    SaslHandshake    request body  = string mechanism
                     response body = int16 error_code, [string mechanism]
    SaslAuthenticate request body  = bytes auth_bytes
                     response body = int16 error_code, nullable string error_message,
                                     bytes auth_bytes
PLAIN sends one token; SCRAM two, and checks the server's signature.

`exchange` is a generator of (api_key, version, body) requests that is sent each
response body (after the correlation id) in turn, so a blocking socket and an asyncio
stream drive the same exchange.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Generator
from dataclasses import dataclass, field

from chronik.security.scram import MECHANISMS, ScramClient, ScramError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 0
MECHANISM_NAMES = ("PLAIN", *MECHANISMS)
# The login module each mechanism's JAAS configuration names (Kafka's classes).
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Request = tuple[int, int, bytes]
Exchange = Generator[Request, bytes, None]


class AuthenticationError(Exception):
    """The broker refused the credentials, or the exchange went wrong. The message names
    no secret."""


class JaasError(ValueError):
    """A JAAS configuration that cannot be read; the message quotes no option's value."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(repr=False)


# One login module entry: `class flag option=value ... ;`. A value is a double-quoted
# string (backslash escapes a character) or a bare word.
_MODULE = re.compile(r"\s*([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)\s+(\w+)")
_OPTION = re.compile(r'\s*([A-Za-z_][\w.\-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"=]+))')
_UNESCAPE = re.compile(r"\\(.)", re.S)
FLAGS = ("required", "requisite", "sufficient", "optional")


def parse_jaas(text: str) -> JaasEntry:
    """The one login module entry of a `sasl.jaas.config` value. Raises JaasError."""
    match = _MODULE.match(text)
    if match is None:
        raise JaasError("does not start with a login module class and a control flag")
    module, flag = match.group(1), match.group(2).lower()
    if flag not in FLAGS:
        raise JaasError(f"control flag {match.group(2)!r} is not one of {', '.join(FLAGS)}")
    options: dict[str, str] = {}
    pos = match.end()
    while True:
        option = _OPTION.match(text, pos)
        if option is None:
            break
        quoted, bare = option.group(2), option.group(3)
        value = _UNESCAPE.sub(r"\1", quoted) if quoted is not None else bare
        options[option.group(1)] = value
        pos = option.end()
    rest = text[pos:].strip()
    if not rest.startswith(";"):
        # Name where reading stopped, never the text there (it may be a password).
        raise JaasError(
            f"cannot read the options after {len(options)} of them "
            "(options are name=\"value\", and the entry ends with ';')"
        )
    if rest[1:].strip():
        raise JaasError("has more than one login module entry")
    return JaasEntry(module, flag, options)


def jaas_credentials(text: str, mechanism: str) -> Credentials:
    """A client's username and password from ``mechanism``'s JAAS configuration."""
    entry = parse_jaas(text)
    expected = LOGIN_MODULES.get(mechanism)
    if expected is not None and entry.login_module != expected:
        raise JaasError(f"names {entry.login_module}, but {mechanism} needs {expected}")
    user, password = entry.options.get("username"), entry.options.get("password")
    if not user or password is None:
        raise JaasError("has no username and password options")
    return Credentials(user, password)


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def _bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


def _handshake_error(answer: bytes) -> int:
    try:
        (error,) = _I16.unpack_from(answer, 0)
    except struct.error as exc:
        raise AuthenticationError(f"unreadable SaslHandshake response: {exc}") from None
    return int(error)


def _authenticate_answer(answer: bytes) -> tuple[int, str, bytes]:
    try:
        (error,) = _I16.unpack_from(answer, 0)
        (size,) = _I16.unpack_from(answer, 2)
        message = bytes(answer[4 : 4 + max(size, 0)]).decode("utf-8", "replace")
        pos = 4 + max(size, 0)
        (length,) = _I32.unpack_from(answer, pos)
        reply = bytes(answer[pos + 4 : pos + 4 + max(length, 0)])
    except struct.error as exc:
        raise AuthenticationError(f"unreadable SaslAuthenticate response: {exc}") from None
    return int(error), message, reply


def exchange(mechanism: str, credentials: Credentials) -> Exchange:
    """SaslHandshake v1 naming ``mechanism``, then SaslAuthenticate v0 until the
    mechanism is done. Raises AuthenticationError."""
    if mechanism not in MECHANISM_NAMES:
        raise AuthenticationError(f"SASL mechanism {mechanism} is not served")
    answer = yield SASL_HANDSHAKE, HANDSHAKE_VERSION, _string(mechanism)
    error = _handshake_error(answer)
    if error:
        raise AuthenticationError(f"the broker does not take SASL mechanism {mechanism} ({error})")

    def step(token: bytes) -> Generator[Request, bytes, bytes]:
        answer = yield SASL_AUTHENTICATE, AUTHENTICATE_VERSION, _bytes(token)
        error, message, reply = _authenticate_answer(answer)
        if error:
            raise AuthenticationError(f"SASL authentication failed: {message or error}")
        return reply

    user, password = credentials.user, credentials.password
    if mechanism == "PLAIN":
        yield from step(b"\0" + user.encode() + b"\0" + password.encode())
        return
    client = ScramClient(mechanism, user, password)
    try:
        server_first = yield from step(client.first())
        server_final = yield from step(client.final(server_first))
        client.verify(server_final)
    except ScramError as exc:
        raise AuthenticationError(str(exc)) from None
