"""ElectLeaders (API key 43), versions 0-2: preferred or unclean leader election (KIP-460).

The controller carries the elections out; another broker answers NOT_CONTROLLER for each
partition (admin clients send this request to the controller). Results follow Kafka's
KafkaController.processReplicaLeaderElection: ELECTION_NOT_NEEDED where the leader is
already the preferred replica (preferred) or is alive (unclean), UNKNOWN_TOPIC_OR_PARTITION
for a partition that does not exist. A request naming no partitions means all of them,
and its answer leaves out those whose election was not needed. v0 has no election type
(preferred) and no top-level error code.
It needs ALTER on the Cluster: without it the request is CLUSTER_AUTHORIZATION_FAILED
(top-level and for each partition named), as Kafka's KafkaApis.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.protocol import errors
from chronik.protocol.compat import millis
from chronik.security.acl_model import Operation

log = logging.getLogger("chronik.elect_leaders")

API_KEY = 43
VERSIONS = (0, 2)
PREFERRED = 0
UNCLEAN = 1
# ElectLeadersRequest's default timeoutMs, used when a request gives none.
DEFAULT_TIMEOUT_MS = 60_000

TopicPartition = tuple[str, int]
Result = tuple[int, str | None]

# Kafka's Errors messages, for results that come without one.
MESSAGES = {
    errors.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    errors.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    errors.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    errors.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    errors.UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
    errors.REQUEST_TIMED_OUT: "The election did not complete within the request's timeout.",
    errors.INVALID_TOPIC_EXCEPTION: "The topic is being deleted.",
}


def election_needed(
    election_type: int, replicas: list[int], leader: int, live: Iterable[int]
) -> bool:
    """Kafka's test of whether a partition needs an election of this type."""
    if election_type == PREFERRED:
        return not replicas or leader != replicas[0]
    return leader < 0 or leader not in set(live)


def judge(
    election_type: int,
    partitions: Iterable[TopicPartition],
    replicas_of: Any,
    leader_of: Any,
    live: Iterable[int],
    deleting: Iterable[str] = (),
) -> dict[TopicPartition, Result]:
    """Each partition's result where no election can be carried out: ELECTION_NOT_NEEDED
    where none is needed, else the error Kafka gives when no replica can be elected.
    ``replicas_of(t, p)`` is None for a partition that does not exist."""
    live = set(live)
    deleting = set(deleting)
    out: dict[TopicPartition, Result] = {}
    for tp in partitions:
        replicas = replicas_of(*tp)
        if replicas is None:
            out[tp] = (errors.UNKNOWN_TOPIC_OR_PARTITION, None)
        elif tp[0] in deleting:
            out[tp] = (errors.INVALID_TOPIC_EXCEPTION, None)
        elif not election_needed(election_type, replicas, leader_of(*tp), live):
            out[tp] = (errors.ELECTION_NOT_NEEDED, None)
        elif election_type == PREFERRED:
            out[tp] = (errors.PREFERRED_LEADER_NOT_AVAILABLE, None)
        else:
            out[tp] = (errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)
    return out


def requested(request: Any) -> list[TopicPartition] | None:
    """The partitions named, each once in the order given; None for every partition."""
    if request.topic_partitions is None:
        return None
    seen: dict[TopicPartition, None] = {}
    for topic in request.topic_partitions:
        for p in topic.partitions:
            seen[(topic.topic, int(p))] = None
    return list(seen)


def _single_node(broker: Services, election_type: int, wanted: list[TopicPartition] | None) -> dict:
    """A cluster of one: this broker is every partition's only replica and its leader."""
    catalog = broker.catalog
    if wanted is None:
        wanted = [(t.name, i) for t in catalog.topics.values() for i in range(len(t.partitions))]

    def replicas_of(name: str, index: int) -> list[int] | None:
        topic = catalog.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return [broker.node_id]

    return judge(election_type, wanted, replicas_of, lambda t, p: broker.node_id, [broker.node_id])


def _every_partition(view: Any) -> list[TopicPartition]:
    return [(t.name, i) for t in view.topics.values() for i in range(t.partition_count)]


async def _cluster(
    cluster: Any, election_type: int, wanted: list[TopicPartition] | None, timeout_ms: int
) -> Mapping[TopicPartition, Result]:
    from chronik.cluster.controller import NotController

    try:
        # The election goes on if the request stops waiting: a state write half done by
        # a cancelled task would leave the controller to find out what happened.
        task = asyncio.ensure_future(cluster.controller.elect_leaders(election_type, wanted))
        return await asyncio.wait_for(asyncio.shield(task), timeout_ms / 1000)
    except NotController:
        every = wanted if wanted is not None else _every_partition(cluster.view)
        return {tp: (errors.NOT_CONTROLLER, None) for tp in every}
    except TimeoutError:
        every = wanted if wanted is not None else _every_partition(cluster.view)
        return {tp: (errors.REQUEST_TIMED_OUT, None) for tp in every}


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    election_type = int(getattr(request, "election_type", PREFERRED))
    wanted = requested(request)
    top = errors.NONE
    if not ctx.allowed_on_cluster(Operation.ALTER):
        top = errors.CLUSTER_AUTHORIZATION_FAILED
        results: Mapping[TopicPartition, Result] = {tp: (top, None) for tp in wanted or ()}
    elif election_type not in (PREFERRED, UNCLEAN):
        top = errors.INVALID_REQUEST
        results = {
            tp: (errors.INVALID_REQUEST, f"Unknown election type {election_type}.")
            for tp in wanted or ()
        }
    elif broker.cluster is None:
        results = _single_node(broker, election_type, wanted)
    else:
        timeout_ms = millis(request.timeout) if request.timeout is not None else 0
        results = await _cluster(
            broker.cluster,
            election_type,
            wanted,
            timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS,
        )
    if wanted is None:
        results = {tp: r for tp, r in results.items() if r[0] != errors.ELECTION_NOT_NEEDED}
    else:
        # Every partition asked about gets an answer, in the order asked.
        results = {tp: results.get(tp, (errors.UNKNOWN_SERVER_ERROR, None)) for tp in wanted}
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, message) in results.items():
        if code != errors.NONE and message is None:
            message = MESSAGES.get(code)
        by_topic.setdefault(topic, []).append(
            ctx.build("PartitionResult", partition_id=index, error_code=code, error_message=message)
        )
    elected = sum(1 for code, _ in results.values() if code == errors.NONE)
    if elected:
        log.info("elected leaders of %d partitions (election type %d)", elected, election_type)
    return ctx.build(
        "ElectLeadersResponse",
        throttle_time=0,
        error_code=top,
        replica_election_results=tuple(
            ctx.build("ReplicaElectionResult", topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )
