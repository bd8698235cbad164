"""JoinGroup (API key 11), versions 0-9.

The answer is held until the group's rebalance completes (or fails for this member).
Needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's
KafkaApis.handleJoinGroupRequest).
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 11
VERSIONS = (0, 9)

# KIP-394: from v4 a member without an id is first handed one (MEMBER_ID_REQUIRED).
REQUIRE_KNOWN_MEMBER_ID_FROM = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        # JoinGroupRequest.getErrorResponse: no generation, member or protocol.
        return ctx.build(
            "JoinGroupResponse",
            throttle_time=0,
            error_code=errors.GROUP_AUTHORIZATION_FAILED,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if ctx.api_version >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id="",
            members=(),
        )
    session_ms = millis(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    rebalance_ms = millis(rebalance) if rebalance is not None else session_ms
    result = await ctx.services.coordinator.join_group(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.api_version >= REQUIRE_KNOWN_MEMBER_ID_FROM,
    )
    members = tuple(
        ctx.build("JoinGroupResponseMember", member_id=m, group_instance_id=i, metadata=md)
        for m, i, md in result.members
    )
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""  # nullable only from v7
    return ctx.build(
        "JoinGroupResponse",
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
