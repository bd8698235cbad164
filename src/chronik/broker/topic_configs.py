"""Changing a topic's configs, shared by AlterConfigs and IncrementalAlterConfigs."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.storage.config import validate_topic_configs

TOPIC = 2
BROKER = 4


def current(broker: Any, name: str) -> dict[str, str] | None:
    """A topic's config overrides (None: no such topic): in a cluster, as ZooKeeper has
    them, since this broker may store none of the topic's partitions."""
    if broker.cluster is not None:
        return broker.cluster.topic_configs(name)
    topic = broker.catalog.get(name)
    return None if topic is None else dict(topic.configs)


async def apply(
    ctx: RequestContext,
    resource: Any,
    set_configs: dict[str, str],
    delete: list[str],
    validate_only: bool,
    replace: bool = False,
) -> Any:
    """Apply one resource's changes; returns the kio resource result."""
    code, message = errors.NONE, None
    catalog = ctx.broker.catalog
    cluster = ctx.broker.cluster
    if resource.resource_type == TOPIC:
        configs = current(ctx.broker, resource.resource_name)
        if configs is None:
            code, message = errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic does not exist"
        else:
            try:
                validate_topic_configs(set_configs)
                if replace:
                    delete = [k for k in configs if k not in set_configs]
                if cluster is not None:
                    new = {k: v for k, v in configs.items() if k not in delete}
                    new.update(set_configs)
                    validate_topic_configs(new)
                    if not validate_only:
                        await cluster.set_topic_configs(resource.resource_name, new)
                elif not validate_only:
                    catalog.alter_topic_configs(resource.resource_name, set_configs, delete)
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                message = str(exc)
    elif resource.resource_type == BROKER:
        code, message = errors.INVALID_REQUEST, "Broker configs are set at start with --set"
    else:
        code, message = (
            errors.INVALID_REQUEST,
            f"Unsupported resource type {resource.resource_type}",
        )
    return ctx.build(
        "AlterConfigsResourceResponse",
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )
