"""AlterConfigs (API key 33), versions 0-2: replaces a topic's overrides, or a broker's
dynamic configs (chronik.broker.dynamic_configs).

Each resource needs ALTER_CONFIGS, as Kafka's KafkaApis checks it: a topic on the Topic
(TOPIC_AUTHORIZATION_FAILED), a broker on the Cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from chronik.broker import topic_configs
from chronik.broker.context import RequestContext
from chronik.security.acl_model import Operation

API_KEY = 33
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    responses = []
    for resource in request.resources:
        denied = topic_configs.refused(ctx, Operation.ALTER_CONFIGS, resource)
        if denied:
            responses.append(
                ctx.build(
                    "AlterConfigsResourceResponse",
                    error_code=denied,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
            continue
        responses.append(
            await topic_configs.apply(
                ctx,
                resource,
                {c.name: c.value for c in resource.configs if c.value is not None},
                [],
                request.validate_only,
                replace=True,
            )
        )
    return ctx.build("AlterConfigsResponse", throttle_time=0, responses=tuple(responses))
