"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server's side.

A credential is stored as Kafka stores it (ScramCredentialUtils), one string per user
and mechanism:

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

The password itself is never kept: SaltedPassword = PBKDF2(password, salt, iterations),
StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
"Server Key"). The exchange is the RFC's three messages; Kafka's `tokenauth` extension
(delegation tokens) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's bounds for iterations (ScramMechanism.minIterations, and the admin's maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """The exchange failed; the message is safe to log and to send to the client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def salted_password(digest: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password, salt, iterations)


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


# The mechanism numbers of DescribeUserScramCredentials and AlterUserScramCredentials.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}


def from_salted_password(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion carries the makings of: the
    client salts the password, the broker keeps only what proves it."""
    digest = MECHANISMS[mechanism]
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=_hmac(digest, salted, b"Server Key"),
        iterations=iterations,
    )


def make_credential(
    mechanism: str,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}, got {iterations}")
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(digest, password.encode(), salt, iterations)
    return from_salted_password(mechanism, salted, salt, iterations)


def check_password(mechanism: str, credential: ScramCredential, password: bytes) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (for SASL/PLAIN)."""
    digest = MECHANISMS[mechanism]
    salted = salted_password(digest, password, credential.salt, credential.iterations)
    stored = hashlib.new(digest, _hmac(digest, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored, credential.stored_key)


_DECOY_KEY = os.urandom(32)


def decoy(mechanism: str, user: str) -> ScramCredential:
    """A credential no password matches, with a salt that is the same for a name each
    time it is asked, as a real user's is."""
    salt = hmac.new(_DECOY_KEY, f"{mechanism}:{user}".encode(), "sha256").digest()
    return ScramCredential(salt, os.urandom(32), os.urandom(32), DEFAULT_ITERATIONS)


def _attributes(message: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:16]!r}")
        attrs.setdefault(part[0], part[2:])
    return attrs


def _unescape_name(name: str) -> str:
    # RFC 5802: "," and "=" in a name are sent as "=2C" and "=3D"; any other "=" is invalid.
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return out


class ScramServer:
    """One authentication: `first` takes client-first and returns server-first, `final`
    takes client-final and returns server-final. `lookup(user)` gives the user's
    credential for this mechanism, or None."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        server_nonce: str | None = None,
    ) -> None:
        self._server_nonce = server_nonce
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.lookup = lookup
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._known = False

    def first(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        # gs2 header: "n," or "y," (no channel binding), an optional "a=authzid", then ",".
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise ScramError("malformed client-first message (channel binding is not offered)")
        bare = parts[2]
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("client-first message lacks a user name or nonce")
        if "tokenauth=true" in bare.lower():
            raise ScramError("delegation tokens are not supported")
        user = _unescape_name(attrs["n"])
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        if authzid and authzid != user:
            raise ScramError("authorization id differs from the user name")
        credential = self.lookup(user)
        # An unknown user goes through the exchange with a made-up credential, so the
        # answer does not tell which names exist; the proof then fails.
        self._known = credential is not None
        self._credential = credential or decoy(self.mechanism, user)
        self.user = user
        self._client_first_bare = bare
        self._nonce = attrs["r"] + (self._server_nonce or base64.b64encode(os.urandom(18)).decode())
        cred = self._credential
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        )
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if self._credential is None:
            raise ScramError("client-final message before client-first")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        proof_at = text.rfind(",p=")
        if proof_at < 0:
            raise ScramError("client-final message lacks a proof")
        without_proof = text[:proof_at]
        attrs = _attributes(text)
        if attrs.get("r") != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except (KeyError, ValueError):
            raise ScramError("malformed proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        signature = _hmac(self.digest, cred.stored_key, auth_message)
        failed = ScramError(
            "Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {self.mechanism}"
        )
        if len(proof) != len(signature):
            raise failed
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self.digest, client_key).digest()
        if not self._known or not hmac.compare_digest(stored, cred.stored_key):
            raise failed
        server_signature = _hmac(self.digest, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side of one exchange: `first()`, then `final(server_first)`, then
    `verify(server_final)`, which checks that the server knew the credential too."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.user = user
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(24)).decode()
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={name},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
            attrs = _attributes(text)
            nonce, salt = attrs["r"], base64.b64decode(attrs["s"], validate=True)
            iterations = int(attrs["i"])
        except (UnicodeDecodeError, KeyError, ValueError):
            raise ScramError("malformed server-first message") from None
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ScramError("the server's nonce does not extend ours")
        if not MIN_ITERATIONS <= iterations <= 10 * MAX_ITERATIONS:
            raise ScramError(f"the server asks for {iterations} iterations")
        salted = salted_password(self.digest, self.password, salt, iterations)
        client_key = _hmac(self.digest, salted, b"Client Key")
        stored_key = hashlib.new(self.digest, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = _hmac(self.digest, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.digest, salted, b"Server Key")
        self._server_signature = _hmac(self.digest, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not self._server_signature or not hmac.compare_digest(server_final, expected):
            raise ScramError("the server's signature is wrong: it does not know the credential")
