"""Kafka's Java client security properties turned into librdkafka's, for the CLI's
`--command-config FILE` (as Kafka's tools take it) and the Spark source's `kafka.*`
options (as Spark's Kafka source takes them):

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
from typing import Any

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
            raise ValueError("sasl.jaas.config has no username and password")
        conf["sasl.username"], conf["sasl.password"] = user, password
    for kind in ("ssl.truststore.type", "ssl.keystore.type"):
        if properties.get(kind, "PEM").upper() != "PEM":
            raise ValueError(f"{kind}={properties[kind]}: only PEM stores are read")
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


# Java's security names that client_settings replaces with librdkafka's.
JAVA_KEYS = (
    "sasl.jaas.config",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.password",
)


def translate(conf: dict[str, str]) -> dict[str, Any]:
    """``conf`` with Java's security names replaced by librdkafka's; everything else as
    it was."""
    if not any(k in conf for k in JAVA_KEYS):
        return dict(conf)
    out: dict[str, Any] = {k: v for k, v in conf.items() if k not in JAVA_KEYS}
    out.update(client_settings(conf))
    return out
