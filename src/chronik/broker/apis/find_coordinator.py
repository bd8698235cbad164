"""FindCoordinator (API key 10), versions 0-6; v4+ carries a batch of keys.

A single node coordinates every group and transactional id: the answer is always us. In a
cluster a group's coordinator is the leader of its partition of __consumer_offsets, a
transactional id's the leader of its partition of __transaction_state; each topic is
created when first needed, as Kafka does.

Needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or on the transactional id
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), for each key in v4+, with no node
(Kafka's KafkaApis.getCoordinator).
"""

from __future__ import annotations

import logging
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.coordinator.offsets_codec import partition_for
from chronik.protocol import errors
from chronik.security.acl_model import Operation, ResourceType

log = logging.getLogger("chronik.coordinator")
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
# How long a FindCoordinator that creates __consumer_offsets waits for its leaders.
CREATE_WAIT_MS = 3000

API_KEY = 10
VERSIONS = (0, 6)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def _answer(
    code: int, message: str | None, node_id: int = -1, endpoint: tuple[str, int] = ("", -1)
) -> dict[str, Any]:
    host, port = endpoint
    return dict(node_id=node_id, host=host, port=port, error_code=code, error_message=message)


def _refused(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any] | None:
    """The answer for a key the principal may not describe, else None."""
    if key_type == GROUP_KEY_TYPE and not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, key):
        return _answer(errors.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    if key_type == TRANSACTION_KEY_TYPE and not ctx.allowed(
        Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return _answer(
            errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed."
        )
    return None


async def _locate(broker: Services, key: str, key_type: int, listener: str) -> dict[str, Any]:
    """In a cluster: the leader of the key's partition of its internal topic."""
    cluster = broker.cluster
    if key_type == TRANSACTION_KEY_TYPE:
        topic, ensure = TRANSACTION_TOPIC, cluster.ensure_transaction_topic
    else:
        topic, ensure = OFFSETS_TOPIC, cluster.ensure_offsets_topic
    count = cluster.partition_count(topic)
    if count is None:
        try:
            await ensure(CREATE_WAIT_MS)
        except Exception as exc:
            log.warning("cannot create %s: %s", topic, exc)
        count = cluster.partition_count(topic)
        if count is None:
            return _answer(errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    leader = cluster.leader_of(topic, partition_for(key, count))
    node = cluster.broker_info(leader) if leader >= 0 else None
    if node is None:
        return _answer(errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    return _answer(errors.NONE, None, node.node_id, node.endpoint(listener))


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    keys = request.coordinator_keys if ctx.api_version >= 4 else [request.key]
    answers = []
    for key in keys:
        refused = _refused(ctx, key, key_type)
        if refused is not None:
            if ctx.api_version >= 4:
                refused["error_message"] = None  # Kafka sets no message per coordinator
            answers.append(refused)
        elif key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            answers.append(_answer(errors.INVALID_REQUEST, f"unknown key type {key_type}"))
        elif broker.cluster is not None:
            answers.append(await _locate(broker, key, key_type, ctx.listener))
        else:
            answers.append(
                _answer(errors.NONE, None, broker.node_id, broker.security.endpoint(ctx.listener))
            )
    if ctx.api_version >= 4:
        coordinators = tuple(
            ctx.build("Coordinator", key=key, **answer)
            for key, answer in zip(keys, answers, strict=True)
        )
        return ctx.build("FindCoordinatorResponse", throttle_time=0, coordinators=coordinators)
    return ctx.build("FindCoordinatorResponse", throttle_time=0, **answers[0])
