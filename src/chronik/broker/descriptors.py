"""The process's file descriptor limit, and what connections may take of it.

Kafka raises the soft RLIMIT_NOFILE in its start scripts; chronik raises it to
the hard limit itself at start. Client connections then get at most half of the
descriptors by default (max.connections), less a reserve for the broker's own
files (listening sockets, metadata, snapshots, modules loaded on first use), so a
flood of connections cannot take the descriptors the log needs to open segment
files and indexes (the log file cache takes the other half, log.open.files.max).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("chronik.broker")

_NR_OPEN = "/proc/sys/fs/nr_open"
_reported: int | None = None


def _ceiling(hard: int) -> int:
    if hard != resource.RLIM_INFINITY:
        return hard
    # An unlimited hard limit still stops at the kernel's nr_open.
    try:
        with open(_NR_OPEN) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 20


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard limit; the soft limit in effect."""
    global _reported
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if soft == resource.RLIM_INFINITY or soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning(
                "cannot raise the file descriptor limit from %d to %d: %s", soft, target, exc
            )
    if _reported != soft:
        # Once per process and figure: restarts of an embedded broker stay quiet.
        log.info("file descriptor limit: %d", soft)
        _reported = soft
    return soft


RESERVED_DESCRIPTORS = 64


def default_max_connections(nofile: int) -> int:
    return max(1, nofile // 2 - RESERVED_DESCRIPTORS)
