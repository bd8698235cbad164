"""WriteTxnMarkers (API key 27), versions 1-2: a transaction coordinator on another
broker asks this one, the leader of some of the transaction's partitions, to write its
commit or abort markers there (chronik.coordinator.marker_writer); a request carries the
markers of every transaction that ended while the previous one was in flight, all
appended before any is waited on. Each partition answers on its own: NONE once the
marker is durable, else the error (NOT_LEADER_OR_FOLLOWER makes the coordinator look the
leader up again).

Only for brokers: needs ALTER or CLUSTER_ACTION on the cluster, else every partition is
CLUSTER_AUTHORIZATION_FAILED and nothing is written (Kafka's
KafkaApis.handleWriteTxnMarkersRequest). In a cluster with an authorizer the brokers'
principal must be allowed that, as in Kafka (a super user).
"""

from __future__ import annotations

import asyncio
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation

API_KEY = 27
VERSIONS = (1, 2)


async def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    permitted = ctx.allowed_on_cluster(Operation.ALTER) or ctx.allowed_on_cluster(
        Operation.CLUSTER_ACTION
    )
    wanted = [
        [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        for marker in request.markers
    ]
    if permitted:
        # Every marker of the request is appended before any is waited on: the
        # transactions share the fsyncs and the wait for replication instead of taking
        # them one after another.
        markers = ctx.services.markers
        appended = [
            markers.append(
                int(marker.producer_id),
                int(marker.producer_epoch),
                int(marker.coordinator_epoch),
                bool(marker.transaction_result),
                tps,
            )
            for marker, tps in zip(request.markers, wanted, strict=True)
        ]
        answered = await asyncio.gather(*(markers.durable(done) for done in appended))
    else:
        answered = [dict.fromkeys(tps, errors.CLUSTER_AUTHORIZATION_FAILED) for tps in wanted]
    for marker, codes in zip(request.markers, answered, strict=True):
        topics = []
        for t in marker.topics:
            parts = tuple(
                ctx.build(
                    "WritableTxnMarkerPartitionResult",
                    partition_index=int(p),
                    error_code=codes[(t.name, int(p))],
                )
                for p in t.partition_indexes
            )
            topics.append(ctx.build("WritableTxnMarkerTopicResult", name=t.name, partitions=parts))
        results.append(
            ctx.build(
                "WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(topics)
            )
        )
    return ctx.build("WriteTxnMarkersResponse", markers=tuple(results))
