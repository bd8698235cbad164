"""DescribeCluster (API key 60), versions 0-1."""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.topics import cluster_members
from chronik.protocol import errors

API_KEY = 60
VERSIONS = (0, 1)
OPERATIONS_OMITTED = -(2**31)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
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
    return ctx.build(
        "DescribeClusterResponse",
        throttle_time=0,
        error_code=errors.NONE,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=controller,
        brokers=nodes,
        cluster_authorized_operations=OPERATIONS_OMITTED,
    )
