"""DescribeConfigs (API key 32), versions 0-4: topic and broker resources.

Each resource needs DESCRIBE_CONFIGS, as Kafka's ConfigHelper checks it: a topic on the
Topic (TOPIC_AUTHORIZATION_FAILED), a broker or broker logger on the Cluster
(CLUSTER_AUTHORIZATION_FAILED), a group on the Group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from chronik.broker import topic_configs
from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.storage.config import SOURCE_DEFAULT, describe_topic_configs

API_KEY = 32
VERSIONS = (0, 4)
TOPIC = 2
BROKER = 4


def _entry(ctx: RequestContext, request: Any, e: Any) -> Any:
    synonyms = ()
    if getattr(request, "include_synonyms", False):
        synonyms = tuple(
            ctx.build("DescribeConfigsSynonym", name=s.name, value=s.value, source=s.source)
            for s in e.synonyms
        )
    return ctx.build(
        "DescribeConfigsResourceResult",
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=e.source,
        is_default=e.source == SOURCE_DEFAULT,
        is_sensitive=e.is_sensitive,
        synonyms=synonyms,
        config_type=e.config_type,
        documentation=e.documentation if getattr(request, "include_documentation", False) else None,
    )


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    results = []
    for resource in request.resources:
        keys = (
            list(resource.configuration_keys) if resource.configuration_keys is not None else None
        )
        code, message, entries = errors.NONE, None, []
        denied = topic_configs.refused(ctx, Operation.DESCRIBE_CONFIGS, resource)
        if denied:
            code, message = denied, topic_configs.REFUSED_MESSAGES[denied]
        elif resource.resource_type == TOPIC:
            configs = topic_configs.current(broker, resource.resource_name)
            if configs is None:
                code, message = errors.UNKNOWN_TOPIC_OR_PARTITION, "Topic does not exist"
            else:
                entries = describe_topic_configs(
                    broker.config.overrides, configs, keys, **broker.dynamic.topic_layers()
                )
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                code, message = errors.INVALID_REQUEST, f"Unknown broker {resource.resource_name}"
            else:
                entries = broker.dynamic.describe(resource.resource_name, keys)
        else:
            code, message = (
                errors.INVALID_REQUEST,
                f"Unsupported resource type {resource.resource_type}",
            )
        results.append(
            ctx.build(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(_entry(ctx, request, e) for e in entries),
            )
        )
    return ctx.build("DescribeConfigsResponse", throttle_time=0, results=tuple(results))
