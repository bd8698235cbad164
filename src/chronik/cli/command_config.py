"""`--command-config FILE`: a Kafka client properties file, as Kafka's tools take it,
turned into librdkafka settings for the CLI's clients.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/chronik/ca.pem
    ssl.keystore.type=PEM                       # mutual TLS: key and certificate chain
    ssl.keystore.location=/etc/chronik/alice.pem

Java's names are translated; librdkafka's own (sasl.username, ssl.ca.location, ...) are
passed through unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from chronik.cli.errors import CliError
from chronik.cli.properties import load_properties

# JAAS options: name="quoted value" or name=bare, before the closing ';'.
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')
PASSED_THROUGH = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "ssl.cipher.suites",
    "client.id",
)


def jaas_credentials(text: str) -> tuple[str | None, str | None]:
    options = {m.group(1): (m.group(2) if m.group(2) is not None else m.group(3))
               for m in _JAAS_OPTION.finditer(text)}
    return options.get("username"), options.get("password")


def client_settings(properties: dict[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {k: v for k, v in properties.items() if k in PASSED_THROUGH}
    if "sasl.jaas.config" in properties:
        user, password = jaas_credentials(properties["sasl.jaas.config"])
        if user is None or password is None:
            raise CliError("sasl.jaas.config has no username and password")
        conf["sasl.username"], conf["sasl.password"] = user, password
    for kind in ("ssl.truststore.type", "ssl.keystore.type"):
        if properties.get(kind, "PEM").upper() != "PEM":
            raise CliError(f"{kind}={properties[kind]}: the CLI reads PEM stores only")
    if "ssl.truststore.location" in properties:
        conf["ssl.ca.location"] = properties["ssl.truststore.location"]
    if "ssl.truststore.certificates" in properties:
        conf["ssl.ca.pem"] = properties["ssl.truststore.certificates"]
    if "ssl.keystore.location" in properties:
        # One PEM file with the key and the chain serves as both.
        conf["ssl.certificate.location"] = properties["ssl.keystore.location"]
        conf["ssl.key.location"] = properties["ssl.keystore.location"]
    if "ssl.keystore.key" in properties:
        conf["ssl.key.pem"] = properties["ssl.keystore.key"]
        conf["ssl.certificate.pem"] = properties.get("ssl.keystore.certificate.chain", "")
    if properties.get("ssl.keystore.password") and "ssl.key.password" not in conf:
        conf["ssl.key.password"] = properties["ssl.keystore.password"]
    if properties.get("ssl.endpoint.identification.algorithm") == "":
        conf["ssl.endpoint.identification.algorithm"] = "none"
    return conf


def load(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        return client_settings(load_properties(Path(path)))
    except OSError as exc:
        raise CliError(f"cannot read --command-config {path}: {exc.strerror}") from None
