"""Where the schema registry is: the ``schemaRegistryUrl`` option, else the broker's own.

A chronik broker that serves a registry reports its URL in DescribeConfigs of the BROKER
resource, as the config ``schema.registry.listen``; each broker of the cluster is asked in
turn until one names one.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka.admin import ConfigResource

from chronik.spark.offsets import admin_client
from chronik.spark.options import OptionError

LISTEN_CONFIG = "schema.registry.listen"
TIMEOUT_S = 30


def as_url(value: str) -> str:
    """``HOST:PORT`` or ``http(s)://HOST:PORT[/path]`` as a base URL."""
    value = value.strip().rstrip("/")
    if not value:
        raise OptionError("option 'schemaRegistryUrl' is empty")
    if "://" not in value:
        value = f"http://{value}"
    scheme = value.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise OptionError(f"schema registry URL must be http:// or https://, got {value!r}")
    return value


def registry_url(options: Mapping[str, str], kafka: dict[str, str]) -> str:
    given = options.get("schemaRegistryUrl")
    if given:
        return as_url(given)
    found = broker_registry(kafka)
    if found is None:
        raise OptionError(
            f"no schema registry: the brokers at {kafka.get('bootstrap.servers')} serve none "
            f"(broker config {LISTEN_CONFIG}) and option 'schemaRegistryUrl' is not set"
        )
    return found


def broker_registry(kafka: dict[str, str]) -> str | None:
    """The registry URL a broker of the cluster reports, or None."""
    admin = admin_client(kafka)
    meta = admin.list_topics(timeout=TIMEOUT_S)
    for node_id in sorted(meta.brokers):
        resource = ConfigResource(ConfigResource.Type.BROKER, str(node_id))
        try:
            configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
        except Exception:  # a broker that refuses (ACLs, an old broker): ask the next
            continue
        entry = configs.get(LISTEN_CONFIG)
        if entry is not None and entry.value:
            return as_url(entry.value)
    return None
