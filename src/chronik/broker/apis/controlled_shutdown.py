"""ControlledShutdown (API key 7), versions 0-3: a broker about to stop asks the
controller to hand the leadership of its partitions to other in-sync replicas first
(Kafka's controlled shutdown; the controller's side: chronik.cluster.controlled_shutdown,
the stopping broker's: chronik.cluster.shutdown_request).

Served by the controller; another broker answers NOT_CONTROLLER. BROKER_NOT_AVAILABLE
for a broker id that is not registered; STALE_BROKER_EPOCH when broker_epoch (v2+, -1:
not checked) is older than the broker's registration (the czxid of /brokers/ids/<id>),
as Kafka's controller. remaining_partitions: those with more than one replica it still
leads, for want of another live in-sync replica (the broker asks again).
REQUEST_TIMED_OUT when the controller cannot write to ZooKeeper within the time the
asking broker waits. A single node is its own controller with nothing to hand on: NONE
for its own id.
Needs CLUSTER_ACTION on the Cluster, else CLUSTER_AUTHORIZATION_FAILED and nothing is
done (Kafka's KafkaApis). v0 comes with request header v0 (no client id, see
chronik.protocol.framing); v3 is flexible. The schemas are in chronik.protocol.legacy:
kio has none, since Kafka 4.0 dropped the API with ZooKeeper mode.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.protocol import errors
from chronik.security.acl_model import Operation
from chronik.storage.errors import StorageError

log = logging.getLogger("chronik.controlled_shutdown")

API_KEY = 7
VERSIONS = (0, 3)
# Under the asking broker's own wait (chronik.cluster.shutdown_request.REQUEST_TIMEOUT).
TIMEOUT_SECONDS = 8.0


async def _remaining(ctx: RequestContext, broker_id: int, epoch: int) -> tuple[int, list]:
    cluster = ctx.services.cluster
    if cluster is None:
        own = broker_id == ctx.services.node_id
        return (errors.NONE if own else errors.BROKER_NOT_AVAILABLE), []
    from chronik.cluster.controller import NotController

    # Carried on if the asking broker stops waiting: a state write half done by a
    # cancelled task would leave the controller to find out what happened.
    task = asyncio.ensure_future(cluster.controller.controlled_shutdown(broker_id, epoch))
    try:
        return errors.NONE, await asyncio.wait_for(asyncio.shield(task), TIMEOUT_SECONDS)
    except NotController:
        return errors.NOT_CONTROLLER, []
    except StorageError as exc:  # BROKER_NOT_AVAILABLE, STALE_BROKER_EPOCH, ZooKeeper away
        log.info("controlled shutdown of broker %d refused: %s", broker_id, exc)
        return exc.code, []
    except TimeoutError:
        return errors.REQUEST_TIMED_OUT, []


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.allowed_on_cluster(Operation.CLUSTER_ACTION):
        code, remaining = errors.CLUSTER_AUTHORIZATION_FAILED, []
    else:
        epoch = int(getattr(request, "broker_epoch", -1))
        code, remaining = await _remaining(ctx, int(request.broker_id), epoch)
    return ctx.build(
        "ControlledShutdownResponse",
        error_code=code,
        remaining_partitions=tuple(
            ctx.build("RemainingPartition", topic_name=topic, partition_index=partition)
            for topic, partition in remaining
        ),
    )
