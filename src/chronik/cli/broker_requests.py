"""Kafka requests librdkafka has no client for (client quotas, partition reassignments,
log directories), sent by chronik's own broker client with kio-built bodies and the
security settings of `--command-config`."""

from __future__ import annotations

import argparse
import asyncio
import ssl
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from chronik.cli.clients import load_command_config
from chronik.cli.errors import CliError
from chronik.cluster.replica_client import BrokerClient, BrokerUnreachable
from chronik.protocol.compat import build


def security_of(conf: dict[str, Any]) -> Any:
    """The broker client's security from librdkafka-style settings."""
    from chronik.security.broker_security import ClientSecurity
    from chronik.security.sasl_client import Credentials

    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol == "PLAINTEXT":
        return None
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        tls = ssl.create_default_context(cafile=conf.get("ssl.ca.location"))
        if str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() in ("", "none"):
            tls.check_hostname = False
        if conf.get("ssl.certificate.location"):
            tls.load_cert_chain(
                conf["ssl.certificate.location"],
                conf.get("ssl.key.location"),
                conf.get("ssl.key.password"),
            )
    mechanism = credentials = None
    if protocol.startswith("SASL_"):
        mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI")
        user, password = conf.get("sasl.username"), conf.get("sasl.password")
        if user is None or password is None:
            raise CliError(f"{protocol} needs sasl.username and sasl.password "
                           "(or sasl.jaas.config) in --command-config")
        credentials = Credentials(str(user), str(password))
    return ClientSecurity("CLI", protocol, tls, mechanism, credentials)


def args_security(args: argparse.Namespace) -> Any:
    try:
        return security_of(load_command_config(args.command_config))
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise CliError(f"--command-config: {exc}") from None


def bootstrap_address(args: argparse.Namespace) -> tuple[str, int]:
    first = args.bootstrap_server.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        raise CliError(f"--bootstrap-server {first}: expected HOST:PORT") from None


def send(
    host: str,
    port: int,
    api: tuple[int, int],
    security: Any,
    connect_timeout: float,
    answer_within: float | None = None,
    **fields: Any,
) -> Any:
    """One request to the broker at host:port; its decoded response (`fields` are the
    request's, `answer_within` how long the answer may take)."""
    request = build(load_request_schema(*api), **fields)

    async def go() -> Any:
        client = BrokerClient(host, port, "chronik-cli", connect_timeout, security)
        try:
            return await client.request(request, answer_within or connect_timeout + 10)
        finally:
            client.close()

    try:
        return asyncio.run(go())
    except BrokerUnreachable as exc:
        raise CliError(f"broker {host}:{port} did not answer: {exc}") from None


def ask(args: argparse.Namespace, api: tuple[int, int], **fields: Any) -> Any:
    """One request to the first bootstrap broker."""
    host, port = bootstrap_address(args)
    return send(host, port, api, args_security(args), args.connect_timeout, **fields)


def error_name(value: Any) -> str:
    try:
        return ErrorCode(int(value)).name.upper()
    except ValueError:
        return f"error {int(value)}"
