"""Storage errors, each carrying the Kafka error code the broker answers with."""

from __future__ import annotations

OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
KAFKA_STORAGE_ERROR = 56
POLICY_VIOLATION = 44


class StorageError(Exception):
    """Base class: ``code`` is the Kafka error code for the failed request."""

    code = KAFKA_STORAGE_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class OffsetOutOfRange(StorageError):
    code = OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartition(StorageError):
    code = UNKNOWN_TOPIC_OR_PARTITION


class InvalidTopicName(StorageError):
    code = INVALID_TOPIC_EXCEPTION


class TopicExists(StorageError):
    code = TOPIC_ALREADY_EXISTS


class InvalidPartitions(StorageError):
    code = INVALID_PARTITIONS


class PolicyViolation(StorageError):
    code = POLICY_VIOLATION


class InvalidConfig(StorageError):
    code = INVALID_CONFIG


class KafkaStorageError(StorageError):
    """A write or fsync of the log failed (full disk, I/O error): nothing of the request
    was acknowledged. Clients retry (KAFKA_STORAGE_ERROR is retriable)."""

    code = KAFKA_STORAGE_ERROR


class ProducerStateError(StorageError):
    """An idempotent-producer batch rejected by sequence or epoch checks."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message, code)
