"""Ports for the tests' listeners, below the kernel's range of ephemeral ports.

A port found free by binding port 0 comes from the ephemeral range, where any client's
outgoing connection may take it before the broker that was meant to listen there binds it
("Address already in use", and the broker exits). Ports below that range are never
handed to outgoing connections, so one found free here stays free until a listener
takes it. Each xdist worker takes its own slice of the pool, and walks it from a random
start, so two workers, or two copies of this module, do not hand out the same port at
once.
"""

from __future__ import annotations

import os
import random
import socket
import threading

POOL = range(20000, 32000)  # under Linux's default ephemeral range, 32768-60999


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = len(POOL) // max(count, 1)
    start = POOL.start + (index % max(count, 1)) * size
    return range(start, start + size)


_ports = _slice()
_lock = threading.Lock()
_next = random.randrange(len(_ports))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on, not handed out by this process a moment ago."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive such ports."""
    global _next
    with _lock:
        for _ in range(len(_ports)):
            at = _next
            _next = (at + 1) % len(_ports)
            base = _ports[at]
            if base + count <= _ports.stop and all(_bindable(base + i) for i in range(count)):
                _next = (at + count) % len(_ports)
                return base
    raise RuntimeError(f"no {count} consecutive free ports in {_ports.start}-{_ports.stop - 1}")
