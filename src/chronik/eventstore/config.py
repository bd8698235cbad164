"""Where a store connects by default, and its librdkafka settings."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_HTTP = "http://127.0.0.1:8080"
# What default_store() reads, falling back to the defaults above.
BOOTSTRAP_ENV = "CHRONIK_BOOTSTRAP"
HTTP_ENV = "CHRONIK_HTTP"


def librdkafka(config: Mapping[str, object]) -> dict[str, object]:
    """librdkafka settings given as keyword arguments: ``security_protocol`` is
    ``security.protocol`` (names with a dot pass as they are)."""
    return {(k if "." in k else k.replace("_", ".")): v for k, v in config.items()}


def client_settings(bootstrap_servers: str, config: Mapping[str, object]) -> dict[str, object]:
    """The settings every consumer and producer of a store starts from."""
    return {"bootstrap.servers": bootstrap_servers, **librdkafka(config)}


def http_auth(
    auth: tuple[str, str] | None, settings: Mapping[str, object]
) -> tuple[str, str] | None:
    """``auth``, else the SASL credentials: one user for both APIs unless told apart."""
    if auth is None and "sasl.username" in settings:
        return (str(settings["sasl.username"]), str(settings.get("sasl.password", "")))
    return auth
