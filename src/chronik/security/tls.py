"""TLS contexts from Kafka's ssl.* settings, PEM stores only: the listeners' server
context, and the client context a broker connects to other brokers with.

    ssl.keystore.type=PEM
    ssl.keystore.location=/etc/chronik/broker.pem     # private key and certificate chain
      or ssl.keystore.key=-----BEGIN PRIVATE KEY-----...  with
         ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE-----...
    ssl.key.password=...                              # for an encrypted key
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/chronik/ca.pem       # or ssl.truststore.certificates=...
    ssl.client.auth=none|requested|required
    ssl.enabled.protocols=TLSv1.2,TLSv1.3
    ssl.cipher.suites=ECDHE-RSA-AES128-GCM-SHA256,... # OpenSSL names, TLS 1.2 and below
    ssl.endpoint.identification.algorithm=https       # or empty: between brokers, no
                                                      # host name check

The files' modification times are kept, so a watcher can tell when to build anew.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

PROTOCOL_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsConfigError(ValueError):
    pass


@dataclass
class TlsSettings:
    values: dict[str, str]
    files: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> TlsSettings:
        return cls({k: v for k, v in values.items() if k.startswith("ssl.")})

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default).strip()

    def changed(self) -> bool:
        """Whether a key or trust store file changed since the context was built."""
        for path, mtime in self.files.items():
            try:
                if os.stat(path).st_mtime != mtime:
                    return True
            except OSError:
                return True
        return False


def _check_pem(settings: TlsSettings, key: str) -> None:
    kind = settings.get(key, "PEM").upper()
    if kind != "PEM":
        raise TlsConfigError(f"{key}={kind} is not served; use PEM")


def _remember(settings: TlsSettings, path: str) -> str:
    try:
        settings.files[path] = os.stat(path).st_mtime
    except OSError as exc:
        raise TlsConfigError(f"cannot read {path}: {exc.strerror}") from None
    return path


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    _check_pem(settings, "ssl.keystore.type")
    password = settings.get("ssl.key.password") or settings.get("ssl.keystore.password") or None
    location = settings.get("ssl.keystore.location")
    inline_key = settings.get("ssl.keystore.key")
    inline_chain = settings.get("ssl.keystore.certificate.chain")
    try:
        if location:
            _remember(settings, location)
            context.load_cert_chain(location, password=password)
            return
        if inline_key and inline_chain:
            # The ssl module loads keys from files only: a private file, gone at once.
            with tempfile.TemporaryDirectory(prefix="chronik-tls-") as directory:
                path = os.path.join(directory, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(inline_key.strip() + "\n" + inline_chain.strip() + "\n")
                context.load_cert_chain(path, password=password)
            return
    except ssl.SSLError as exc:
        # The reason names the failing step, never the key's bytes or its password.
        raise TlsConfigError(f"cannot load the key store: {exc.reason or exc}") from None
    raise TlsConfigError(
        "a TLS listener needs ssl.keystore.location, or ssl.keystore.key with "
        "ssl.keystore.certificate.chain"
    )


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    _check_pem(settings, "ssl.truststore.type")
    location = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=_remember(settings, location))
            return True
        if inline:
            context.load_verify_locations(cadata=inline)
            return True
    except ssl.SSLError as exc:
        raise TlsConfigError(f"cannot load the trust store: {exc.reason or exc}") from None
    return False


def _configure_protocols(context: ssl.SSLContext, settings: TlsSettings) -> None:
    protocols = [p.strip() for p in settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")
                 .split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOL_VERSIONS]
    if unknown or not protocols:
        raise TlsConfigError(
            f"ssl.enabled.protocols: {', '.join(unknown) or 'none given'} "
            f"(served: {', '.join(PROTOCOL_VERSIONS)})"
        )
    versions = sorted(PROTOCOL_VERSIONS[p] for p in protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    ciphers = settings.get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(c.strip() for c in ciphers.split(",")))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: no cipher matches {ciphers!r}") from None


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    settings.files.clear()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure_protocols(context, settings)
    _load_keystore(context, settings)
    client_auth = settings.get("ssl.client.auth", "none").lower()
    if client_auth not in CLIENT_AUTH:
        raise TlsConfigError(
            f"ssl.client.auth must be none, requested or required, not {client_auth}"
        )
    has_trust = _load_truststore(context, settings)
    if client_auth != "none" and not has_trust:
        raise TlsConfigError(f"ssl.client.auth={client_auth} needs a trust store to check clients")
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A broker's context for connecting to another broker: the other's certificate
    checked against the trust store (the system's CAs without one), this broker's own
    key store certificate presented (for ssl.client.auth), and the host name checked
    unless ssl.endpoint.identification.algorithm is empty (Kafka's default: https)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure_protocols(context, settings)
    if not _load_truststore(context, settings):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.get("ssl.keystore.location") or settings.get("ssl.keystore.key"):
        _load_keystore(context, settings)
    algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("", "https"):
        raise TlsConfigError(
            f"ssl.endpoint.identification.algorithm must be https or empty, not {algorithm}"
        )
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


# Attribute names as Java's X500Principal.getName() (RFC 2253) writes them.
_RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def subject_name(peercert: Mapping[str, object] | None) -> str | None:
    """A client certificate's subject as Kafka's default principal builder names it
    (X500Principal.getName(): RFC 2253, most specific attribute first)."""
    if not peercert:
        return None
    subject = peercert.get("subject") or ()
    rdns: list[str] = []
    for rdn in subject:  # type: ignore[union-attr]
        parts = [f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn]
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))
