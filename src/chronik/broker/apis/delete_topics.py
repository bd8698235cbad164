"""DeleteTopics (API key 20), versions 1-6.

Authorization as Kafka's KafkaApis: each topic needs DELETE on the Topic (else
TOPIC_AUTHORIZATION_FAILED, whether it exists or not); one named by id also DESCRIBE,
without which its name is not told.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from chronik.broker.context import RequestContext
from chronik.broker.services import Services
from chronik.broker.topics import INTERNAL_TOPICS, topic_by_id
from chronik.protocol import errors
from chronik.protocol.compat import ZERO_UUID, millis
from chronik.security.acl_model import Operation, ResourceType

API_KEY = 20
VERSIONS = (1, 6)

log = logging.getLogger("chronik.topics")


def _lookup(broker: Services, name: str | None, topic_id: Any) -> Any:
    """The topic's name and id: from the catalog, or in a cluster from its view."""
    if broker.cluster is None:
        return topic_by_id(broker, topic_id) if name is None else broker.catalog.get(name)
    view = broker.cluster.view
    found = view.topic_by_id(topic_id) if name is None else view.topics.get(name)
    if found is None:
        return None
    return SimpleNamespace(name=found.name, topic_id=found.assignment.topic_id)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.services
    wanted: list[tuple[str | None, Any]] = []
    if hasattr(request, "topic_names") and not getattr(request, "topics", None):
        wanted = [(n, None) for n in request.topic_names]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
    results = []
    for name, topic_id in wanted:
        by_id = name is None and topic_id is not None and topic_id != ZERO_UUID
        if by_id:
            topic = _lookup(broker, None, topic_id)
            missing = errors.UNKNOWN_TOPIC_ID
        else:
            topic = _lookup(broker, name, None) if name else None
            missing = errors.UNKNOWN_TOPIC_OR_PARTITION
        # The name asked for, or the one the id names: what the principal is checked on.
        target = topic.name if by_id and topic is not None else name
        code, message = errors.NONE, None
        if not broker.config.delete_topic_enable:
            code, message = errors.TOPIC_DELETION_DISABLED, "delete.topic.enable is false"
        elif by_id and topic is None:
            code, message = missing, "This server does not host this topic."
        elif by_id and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, target):
            code, message = errors.TOPIC_AUTHORIZATION_FAILED, None
        elif target and not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, target):
            code, message = errors.TOPIC_AUTHORIZATION_FAILED, None
            if by_id:
                name = target  # it may describe the topic, so it is told its name
        elif topic is None:
            code, message = missing, "This server does not host this topic."
        elif topic.name in INTERNAL_TOPICS:
            # The group coordinator writes there for as long as the broker runs.
            code = errors.INVALID_TOPIC_EXCEPTION
            message = f"Cannot delete internal topic {topic.name}"
        elif broker.cluster is not None:
            name, topic_id = topic.name, topic.topic_id
            try:
                await broker.cluster.delete_topic(topic.name, millis(request.timeout))
            except Exception as exc:
                code = getattr(exc, "code", None)
                if code is None:
                    raise
                message = str(exc)
        else:
            name, topic_id = topic.name, topic.topic_id
            broker.catalog.delete_topic(topic.name)
            if broker.coordinator is not None and hasattr(broker.coordinator, "on_topic_deleted"):
                broker.coordinator.on_topic_deleted(topic.name)
            log.info("deleted topic %s", topic.name)
        results.append(
            ctx.build(
                "DeletableTopicResult",
                name=name,
                topic_id=topic_id or ZERO_UUID,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.build("DeleteTopicsResponse", throttle_time=0, responses=tuple(results))
