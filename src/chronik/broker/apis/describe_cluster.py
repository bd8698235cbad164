"""DescribeCluster (API key 60), versions 0-1.

Refuses nobody, as Kafka; include_cluster_authorized_operations fills in the Cluster's
authorized-operations bit set (0 without DESCRIBE on it).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import cluster_members
from chronik.protocol import errors
from chronik.security.acl_model import CLUSTER_NAME, Operation, ResourceType

API_KEY = 60
VERSIONS = (0, 1)
OPERATIONS_OMITTED = -(2**31)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    members, controller = cluster_members(broker, ctx.listener)
    nodes = tuple(
        ctx.build(
            "DescribeClusterBroker",
            broker_id=node,
            host=host,
            port=port,
            rack=rack,
            is_fenced=False,
        )
        for node, host, port, rack in members
    )
    operations = OPERATIONS_OMITTED
    if getattr(request, "include_cluster_authorized_operations", False):
        operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.allowed_on_cluster(Operation.DESCRIBE)
            else 0
        )
    return ctx.build(
        "DescribeClusterResponse",
        throttle_time=0,
        error_code=errors.NONE,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=controller,
        brokers=nodes,
        cluster_authorized_operations=operations,
    )
