"""Turn SIGTERM into KeyboardInterrupt so console tools stop the same way on both."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

_STOPS = {signal.SIGINT, signal.SIGTERM}


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block: they arrive, as KeyboardInterrupt, after it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
