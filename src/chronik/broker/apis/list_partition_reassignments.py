"""ListPartitionReassignments (API key 46), version 0: the reassignments in progress.

Each partition being reassigned with its replicas (original and target together, as
Metadata shows them meanwhile), the replicas being added and those being removed, from
the topics' znodes as this broker's cluster view has them (KIP-455). Kafka answers
from the controller; any broker of a chronik cluster answers the same. A request naming
no topics (null) lists every reassignment; partitions named that are not being
reassigned are left out, as in Kafka. It needs DESCRIBE on the Cluster (else
CLUSTER_AUTHORIZATION_FAILED). A single node moves nothing: the list is empty.
"""

from __future__ import annotations

from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation

API_KEY = 46
VERSIONS = (0, 0)


def ongoing(view: Any, named: dict[str, set[int]] | None) -> dict[str, list[tuple[int, Any]]]:
    """Topic -> [(partition, assignment)] of the partitions being reassigned."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for name in sorted(view.topics if named is None else named):
        topic = view.topics.get(name)
        if topic is None:
            continue
        assignment = topic.assignment
        for partition in sorted(assignment.replicas):
            if named is not None and partition not in named[name]:
                continue
            if assignment.reassigning(partition):
                out.setdefault(name, []).append((partition, assignment))
    return out


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        return ctx.build(
            "ListPartitionReassignmentsResponse", throttle_time=0,
            error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.", topics=(),
        )
    named: dict[str, set[int]] | None = None
    if request.topics is not None:
        named = {}
        for topic in request.topics:
            named.setdefault(topic.name, set()).update(int(p) for p in topic.partition_indexes)
    found = {} if broker.cluster is None else ongoing(broker.cluster.view, named)
    return ctx.build(
        "ListPartitionReassignmentsResponse",
        throttle_time=0,
        error_code=errors.NONE,
        error_message=None,
        topics=tuple(
            ctx.build(
                "OngoingTopicReassignment",
                name=name,
                partitions=tuple(
                    ctx.build(
                        "OngoingPartitionReassignment",
                        partition_index=p,
                        replicas=tuple(a.replicas[p]),
                        adding_replicas=tuple(a.adding.get(p, ())),
                        removing_replicas=tuple(a.removing.get(p, ())),
                    )
                    for p, a in parts
                ),
            )
            for name, parts in found.items()
        ),
    )
