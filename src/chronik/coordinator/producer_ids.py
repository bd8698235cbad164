# Producer id allocation, persisted so ids are never reused across restarts.
#
# File format: one ASCII decimal line, the first id of the next block to hand
# out. A block of BLOCK ids is reserved (and the file fsynced) before any id in
# it is given to a producer, as Kafka's ProducerIdManager reserves blocks.
from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._next = 0
        self._limit = 0
        if path.exists():
            text = path.read_text().strip()
            self._next = self._limit = int(text) if text else 0

    def _reserve(self) -> None:
        limit = self._next + BLOCK
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(f"{limit}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._limit = limit

    def allocate(self) -> int:
        if self._next >= self._limit:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid
