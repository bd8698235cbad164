"""AlterPartitionReassignments (API key 45), version 0: move partitions' replicas (KIP-455).

The controller carries it out (chronik.cluster.controller, rules in
chronik.cluster.reassignment): each partition named with replicas starts a reassignment
to them (replacing one in progress), each named with null cancels the one in progress.
The answer comes once the topics' znodes are written; the copying goes on, and
ListPartitionReassignments shows it. Another broker answers NOT_CONTROLLER (admin clients
send this request to the controller). Errors as Kafka's: INVALID_REPLICA_ASSIGNMENT for
an empty list, a repeated broker or a broker that is not registered,
NO_REASSIGNMENT_IN_PROGRESS for a cancel with nothing to cancel,
UNKNOWN_TOPIC_OR_PARTITION. It needs ALTER on the Cluster (else
CLUSTER_AUTHORIZATION_FAILED, top-level and for every partition).
A single node is every partition's only replica: a target of just itself changes nothing,
any other broker is not registered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.security.acl_model import Operation

log = logging.getLogger("chronik.reassignments")

API_KEY = 45
VERSIONS = (0, 0)
DEFAULT_TIMEOUT_MS = 60_000

TopicPartition = tuple[str, int]
Result = tuple[int, str | None]

MESSAGES = {
    errors.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    errors.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    errors.REQUEST_TIMED_OUT: "The reassignment was not started within the request's timeout.",
    errors.INVALID_REQUEST: "The partition is named more than once.",
}


def requested(request: Any) -> tuple[dict[TopicPartition, list[int] | None], set[TopicPartition]]:
    """Each partition's target (None: cancel), and the partitions named twice."""
    wanted: dict[TopicPartition, list[int] | None] = {}
    twice: set[TopicPartition] = set()
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            if tp in wanted:
                twice.add(tp)
            wanted[tp] = None if p.replicas is None else [int(b) for b in p.replicas]
    return wanted, twice


def _single_node(node_id: int, catalog: Any, wanted: dict[TopicPartition, Any]) -> dict:
    results: dict[TopicPartition, Result] = {}
    for (name, index), target in wanted.items():
        topic = catalog.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            results[(name, index)] = (errors.UNKNOWN_TOPIC_OR_PARTITION,
                                      "The partition does not exist.")
        elif target is None:
            results[(name, index)] = (errors.NO_REASSIGNMENT_IN_PROGRESS,
                                      "No ongoing reassignment for this partition.")
        elif target != [node_id]:
            from chronik.cluster.reassignment import Refused, check_target

            try:
                check_target(target, {node_id})
                results[(name, index)] = (errors.INVALID_REPLICA_ASSIGNMENT,
                                          "A single node holds every partition alone.")
            except Refused as exc:
                results[(name, index)] = (exc.code, exc.message)
        else:
            results[(name, index)] = (errors.NONE, None)
    return results


async def _cluster(cluster: Any, wanted: dict, timeout_ms: int) -> dict[TopicPartition, Result]:
    from chronik.cluster.controller import NotController

    try:
        task = asyncio.ensure_future(cluster.controller.alter_reassignments(wanted))
        return await asyncio.wait_for(asyncio.shield(task), timeout_ms / 1000)
    except NotController:
        return {tp: (errors.NOT_CONTROLLER, None) for tp in wanted}
    except TimeoutError:
        return {tp: (errors.REQUEST_TIMED_OUT, None) for tp in wanted}


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    wanted, twice = requested(request)
    top = errors.NONE
    if not ctx.allowed_on_cluster(Operation.ALTER):
        top = errors.CLUSTER_AUTHORIZATION_FAILED
        results: dict[TopicPartition, Result] = {tp: (top, None) for tp in wanted}
    else:
        results = {tp: (errors.INVALID_REQUEST, None) for tp in twice}
        todo = {tp: t for tp, t in wanted.items() if tp not in twice}
        if broker.cluster is None:
            results.update(_single_node(broker.node_id, broker.catalog, todo))
        elif todo:
            timeout_ms = millis(request.timeout) if request.timeout is not None else 0
            results.update(await _cluster(
                broker.cluster, todo, timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS
            ))
        if results and all(code == errors.NOT_CONTROLLER for code, _ in results.values()):
            top = errors.NOT_CONTROLLER
    by_topic: dict[str, list[Any]] = {}
    for (topic, index) in wanted:
        code, message = results.get((topic, index), (errors.UNKNOWN_SERVER_ERROR, None))
        if code != errors.NONE and message is None:
            message = MESSAGES.get(code)
        by_topic.setdefault(topic, []).append(ctx.build(
            "ReassignablePartitionResponse", partition_index=index, error_code=code,
            error_message=message,
        ))
    return ctx.build(
        "AlterPartitionReassignmentsResponse",
        throttle_time=0,
        error_code=top,
        error_message=MESSAGES.get(top) if top != errors.NONE else None,
        responses=tuple(
            ctx.build("ReassignableTopicResponse", name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )
