"""Turn SIGTERM into KeyboardInterrupt so console tools stop the same way on both."""

from __future__ import annotations

import signal
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
