"""A one-line progress bar on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import shutil
import sys
import time


class Progress:
    def __init__(self, total: int, unit: str = "records", every: float = 0.2) -> None:
        self.total = max(total, 1)
        self.unit = unit
        self.every = every
        self.enabled = sys.stderr.isatty()
        self.started = time.perf_counter()
        self.drawn_at = 0.0

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.drawn_at < self.every and done < self.total:
            return
        self.drawn_at = now
        rate = done / max(now - self.started, 1e-9)
        # Fixed-width text keeps the bar from jumping as the numbers grow.
        text = f" {done}/{self.total} {self.unit} {rate:,.0f}/s".ljust(
            2 * len(str(self.total)) + 30
        )
        width = max(shutil.get_terminal_size((80, 20)).columns - len(text) - 8, 10)
        filled = int(width * min(done / self.total, 1.0))
        percent = 100 * min(done / self.total, 1.0)
        sys.stderr.write(f"\r[{'#' * filled}{'-' * (width - filled)}] {percent:3.0f}%{text}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
