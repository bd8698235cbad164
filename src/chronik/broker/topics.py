"""Topic lookups shared by the handlers, including Kafka's auto-creation."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chronik.broker.server import Broker

log = logging.getLogger("chronik.topics")


# The topics only the broker itself writes (Kafka's Topic.isInternal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def is_internal(name: str) -> bool:
    return name.startswith("__")


def get_or_create(broker: Broker, name: str, allow_auto_create: bool = True) -> Any | None:
    """The topic, created with the broker's defaults if Kafka would auto-create it."""
    topic = broker.catalog.get(name)
    if topic is not None or not (allow_auto_create and broker.config.auto_create_topics):
        return topic
    try:
        topic = broker.catalog.create_topic(name, broker.config.num_partitions, {})
    except Exception as exc:  # invalid name, or a race with a concurrent create
        log.info("not auto-creating topic %r: %s", name, exc)
        return broker.catalog.get(name)
    log.info("auto-created topic %s with %d partitions", name, broker.config.num_partitions)
    return topic


def topic_by_id(broker: Broker, topic_id: Any) -> Any | None:
    for topic in broker.catalog.topics.values():
        if topic.topic_id == topic_id:
            return topic
    return None
