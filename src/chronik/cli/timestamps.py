"""Points in time typed on the command line, as Kafka epoch milliseconds."""

from __future__ import annotations

from datetime import datetime

from chronik.cli.errors import CliError


def parse_datetime_ms(text: str) -> int:
    """An ISO 8601 datetime (local time when it has no zone) or epoch milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"bad time {text!r}: expected ISO 8601 like 2024-05-01T12:00:00Z, or epoch ms"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)
