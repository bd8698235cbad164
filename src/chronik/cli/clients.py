"""confluent-kafka clients configured the way every command needs them.

All commands go through `Cluster`: it builds client configs with bounded connection
timeouts, keeps librdkafka's own log lines off the terminal, and turns "no broker"
and "no such topic" into a `CliError` instead of a hang or a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from functools import cached_property
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec, TopicMetadata

from chronik.cli.errors import CliError, describe_kafka_error

# librdkafka logs every refused connection; the command reports the outcome itself.
LIBRDKAFKA_LOG = logging.getLogger("chronik.cli.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
LIBRDKAFKA_LOG.propagate = False

# Admin operations after the broker has answered once; long enough for a slow disk.
OPERATION_TIMEOUT = 30.0


def show_client_logs() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("librdkafka: %(message)s"))
    LIBRDKAFKA_LOG.addHandler(handler)
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG)


def load_command_config(path: str | None) -> dict[str, Any]:
    """`--command-config FILE`: Kafka client properties, as librdkafka settings."""
    if not path:
        return {}
    from chronik.cli.errors import CliError
    from chronik.cli.properties import load_properties
    from chronik.security.client_settings import client_settings

    try:
        return client_settings(load_properties(path))
    except OSError as exc:
        raise CliError(f"cannot read --command-config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise CliError(f"--command-config {path}: {exc}") from None


class Cluster:
    """One broker address plus the clients and lookups commands share."""

    def __init__(
        self,
        bootstrap: str,
        connect_timeout: float = 5.0,
        security: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.connect_timeout = connect_timeout
        self.security = security or {}

    @classmethod
    def from_args(cls, args: Any) -> Cluster:
        security = load_command_config(getattr(args, "command_config", None))
        return cls(args.bootstrap_server, args.connect_timeout, security)

    def config(self, **extra: Any) -> dict[str, Any]:
        timeout_ms = int(self.connect_timeout * 1000)
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "client.id": "chronik-cli",
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "logger": LIBRDKAFKA_LOG,
        }
        conf.update(self.security)
        conf.update(extra)
        return conf

    @cached_property
    def admin(self) -> AdminClient:
        return AdminClient(self.config())

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        """Fetch cluster metadata, failing fast with one line if no broker answers."""
        try:
            if topic is None:
                return self.admin.list_topics(timeout=self.connect_timeout)
            return self.admin.list_topics(topic=topic, timeout=self.connect_timeout)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                reason = f"no answer within {self.connect_timeout:g}s"
            else:
                reason = describe_kafka_error(exc)
            raise CliError(f"cannot reach a broker at {self.bootstrap} ({reason})") from None

    def topic(self, name: str) -> TopicMetadata:
        """Metadata of an existing topic (listing all topics never auto-creates one)."""
        topics = self.metadata().topics
        meta = topics.get(name)
        if meta is None:
            raise CliError(f"topic '{name}' does not exist")
        if meta.error is not None:
            raise CliError(f"topic '{name}': {describe_kafka_error(meta.error)}")
        return meta

    def partitions(self, name: str) -> list[int]:
        return sorted(self.topic(name).partitions)

    def watermarks(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, latest) offset of each partition, by ListOffsets."""
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        earliest = self.list_offsets(partitions, OffsetSpec.earliest())
        latest = self.list_offsets(partitions, OffsetSpec.latest())
        return {key: (earliest[key], latest[key]) for key in earliest}

    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: OffsetSpec
    ) -> dict[tuple[str, int], int]:
        """Offsets for `spec` (earliest, latest or a timestamp); -1 when none matches."""
        request = {TopicPartition(tp.topic, tp.partition): spec for tp in partitions}
        if not request:
            return {}
        futures = self.admin.list_offsets(request, request_timeout=OPERATION_TIMEOUT)
        result: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            info = wait(future, f"list offsets of {tp.topic}-{tp.partition}")
            result[(tp.topic, tp.partition)] = info.offset
        return result


def wait(future: Future, what: str) -> Any:
    """Result of an admin future, or a CliError naming the operation that failed."""
    try:
        return future.result(timeout=OPERATION_TIMEOUT)
    except KafkaException as exc:
        raise CliError(f"{what}: {describe_kafka_error(exc)}") from None
    except TimeoutError:
        raise CliError(f"{what}: no answer within {OPERATION_TIMEOUT:g}s") from None
