"""Catching up on every event of a topic through a consumer group, each committed only
after it was handled (at least once)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from chronik.eventstore.config import librdkafka
from chronik.eventstore.events import VERSION_HEADER, Event

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition


class Subscription:
    """Events from a consumer group (EventStore.subscribe); close it when done (or use
    it as a context manager)."""

    def __init__(
        self, consumer: Consumer, topics: list[str], stop_at_end: bool, poll_timeout: float
    ) -> None:
        self.consumer = consumer
        self.stop_at_end = stop_at_end
        self.poll_timeout = poll_timeout
        self.assigned: set[tuple[str, int]] = set()
        self.at_end: set[tuple[str, int]] = set()
        self._pending: Message | None = None
        self._closed = False
        consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.update((p.topic, p.partition) for p in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            self.assigned.discard((p.topic, p.partition))
            self.at_end.discard((p.topic, p.partition))

    def _done(self) -> bool:
        return self.stop_at_end and bool(self.assigned) and self.assigned <= self.at_end

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Event:
        from confluent_kafka import KafkaError, KafkaException

        if self._closed:
            raise StopIteration
        if self._pending is not None:
            self.consumer.store_offsets(message=self._pending)
            self._pending = None
        while True:
            msg = self.consumer.poll(self.poll_timeout)
            if msg is None:
                if self._done():
                    raise StopIteration
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(_where(msg))
                    if self._done():
                        raise StopIteration
                    continue
                if err.fatal() or not err.retriable():
                    raise KafkaException(err)
                continue
            self.at_end.discard(_where(msg))
            self._pending = msg
            return _event(msg)

    def close(self, commit_last: bool = True) -> None:
        """Commit what was handled (the last event too unless ``commit_last`` is false)
        and leave the group."""
        from confluent_kafka import KafkaException

        if self._closed:
            return
        self._closed = True
        if self._pending is not None and commit_last:
            self.consumer.store_offsets(message=self._pending)
        self._pending = None
        with contextlib.suppress(KafkaException):  # nothing stored since the last commit
            self.consumer.commit(asynchronous=False)
        self.consumer.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def subscribe(
    client_config: Mapping[str, object],
    topic: str | list[str],
    group_id: str,
    stop_at_end: bool,
    poll_timeout: float,
    config: Mapping[str, object],
) -> Subscription:
    # confluent_kafka is loaded only once a Kafka client is asked for.
    from confluent_kafka import Consumer

    settings = {
        **client_config,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        # An offset is stored (and so committed) only once its event was handled.
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        **librdkafka(config),
    }
    topics = [topic] if isinstance(topic, str) else list(topic)
    return Subscription(Consumer(settings), topics, stop_at_end, poll_timeout)


def handle_all(subscription: Subscription, handler: Callable[[Event], object]) -> int:
    """Hand each event of ``subscription`` to ``handler`` and close it; an event the
    handler raised on is not committed. Returns how many events were handled."""
    count = 0
    try:
        for event in subscription:
            try:
                handler(event)
            except BaseException:
                subscription.close(commit_last=False)
                raise
            count += 1
    finally:
        subscription.close()
    return count


# poll() hands back errors as messages too, hence None in the stubs' return types; a
# message from a partition (its records or its end) has its topic, partition and offset,
# and a consumer's headers are a list of (str, bytes | None) pairs.
def _where(msg: Message) -> tuple[str, int]:
    return cast(str, msg.topic()), cast(int, msg.partition())


def _event(msg: Message) -> Event:
    headers = list(cast("list[tuple[str, bytes | None]] | None", msg.headers()) or [])
    version = None
    for name, value in headers:
        if name == VERSION_HEADER and value is not None and value.isdigit():
            version = int(value)
    return Event(
        version,
        cast(int, msg.offset()),
        cast(int, msg.partition()),
        msg.timestamp()[1],
        msg.key(),
        msg.value(),
        headers,
    )
