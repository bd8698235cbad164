"""The one exception type a command raises to end with a clear message."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException


class CliError(Exception):
    """A failure the user can act on; main() prints it as one line and exits non-zero."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def describe_kafka_error(err: KafkaError | KafkaException | BaseException) -> str:
    """Render a librdkafka error as a short sentence instead of its repr."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        text = err.str() or err.name()
        # librdkafka prefixes many messages with "Broker: " / "Local: "; keep the substance.
        for prefix in ("Broker: ", "Local: "):
            text = text.replace(prefix, "")
        return f"{text} ({err.name()})"
    return str(err)
