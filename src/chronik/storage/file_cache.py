"""Open descriptors of segment and index files: one bounded LRU for the whole process.

Every .log, .index and .timeindex file is a ``CachedFile``: a path, the flags to open it
with, and a descriptor that exists only while the file is in the cache. A user pins the
file for the length of one system call or one scan (``with f as fd:``); a pinned file is
never closed under its user, an unpinned one may be closed at any time to make room and
is reopened by the next pin. So the descriptors held stay near ``capacity`` however many
partitions and segments there are; only files pinned at the same moment can push past it.

Threads: pins may be taken on any thread (the group-commit fsync and the compaction
rewrite run on worker threads while the event loop evicts and closes), so the cache's
bookkeeping is under one lock; the system calls made while a file is pinned are not.
"""
from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from chronik.storage.diskio import write_all

MIN_CAPACITY = 16
# With no setting, half of the soft descriptor limit goes to log files: the other half
# stays for connections, snapshots, directory fsyncs and the rest of the process.
DEFAULT_SHARE = 0.5


def default_capacity() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(MIN_CAPACITY, int(soft * DEFAULT_SHARE))


class FileCache:
    def __init__(self, capacity: int | None = None) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()  # least recent first
        self.capacity = capacity if capacity is not None else default_capacity()
        self.opens = 0  # descriptors opened, for tests and metrics
        self.evictions = 0  # descriptors closed to make room

    def file(self, path: Path, flags: int, *, create_flags: int = 0) -> CachedFile:
        """A file opened with ``flags`` whenever it is (re)opened; ``create_flags`` (such as
        O_CREAT | O_TRUNC) are added to the first open only."""
        return CachedFile(self, path, flags, create_flags)

    def configure(self, capacity: int | None) -> int:
        """Set the capacity (None or < 1: from the descriptor limit now), closing what is over."""
        with self._lock:
            self.capacity = capacity if capacity and capacity > 0 else default_capacity()
            self._shrink(self.capacity)
            return self.capacity

    @property
    def open_count(self) -> int:
        return len(self._open)

    # -- under the lock ------------------------------------------------------------------
    def _open_file(self, f: CachedFile) -> int:
        self._shrink(self.capacity - 1)
        try:
            fd = os.open(f.path, f.flags | f.create_flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            # The process ran out elsewhere (connections): give back half of ours, once.
            self._shrink(len(self._open) // 2)
            fd = os.open(f.path, f.flags | f.create_flags, 0o644)
        f.create_flags = 0
        f.fd = fd
        self._open[f] = None
        self.opens += 1
        return fd

    def _shrink(self, target: int) -> None:
        excess = len(self._open) - max(target, 0)
        if excess <= 0:
            return
        victims = []
        for f in self._open:  # least recently used first; pinned files are skipped
            if not f.pins:
                victims.append(f)
                if len(victims) == excess:
                    break
        for f in victims:
            self._close(f)
        self.evictions += len(victims)

    def _close(self, f: CachedFile) -> None:
        fd, f.fd = f.fd, None
        f.close_pending = False
        self._open.pop(f, None)
        if fd is not None:
            # A failed close loses nothing: write errors are fsync's to report.
            with contextlib.suppress(OSError):
                os.close(fd)


class CachedFile:
    """One file's place in the cache. ``with f as fd:`` pins it and yields its descriptor."""

    __slots__ = ("cache", "path", "flags", "create_flags", "fd", "pins", "close_pending",
                 "retired")

    def __init__(self, cache: FileCache, path: Path, flags: int, create_flags: int) -> None:
        self.cache = cache
        self.path = path
        self.flags = flags
        self.create_flags = create_flags
        self.fd: int | None = None
        self.pins = 0
        self.close_pending = False
        self.retired = False

    def acquire(self) -> int:
        cache = self.cache
        with cache._lock:
            fd = self.fd
            if fd is None:
                # Retired: no reopen; but a user pinned from before still shares the
                # descriptor it keeps open.
                if self.retired:
                    raise OSError(errno.EBADF, "file is closed", str(self.path))
                fd = cache._open_file(self)
            else:
                cache._open.move_to_end(self)
            self.pins += 1
            return fd

    def release(self) -> None:
        cache = self.cache
        with cache._lock:
            self.pins -= 1
            if not self.pins and self.close_pending:
                cache._close(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Pin, write every byte of ``data`` (as diskio.write_all), unpin: ``with f as fd:
        write_all(fd, data)`` without the context manager's calls, for the append path."""
        fd = self.acquire()
        try:
            written = os.write(fd, data)
            if written < len(data):  # a disk filling part way: the rest, or the error
                write_all(fd, memoryview(data)[written:])
        finally:
            self.release()

    def __enter__(self) -> int:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def is_open(self) -> bool:
        return self.fd is not None

    def open_now(self) -> None:
        """Open (creating, with the create flags) at once rather than at first use."""
        self.acquire()
        self.release()

    def close(self) -> None:
        """Close the descriptor now, or when the last user unpins it; a later pin reopens."""
        with self.cache._lock:
            self._close_locked()

    def retire(self) -> None:
        """Close for good (the file is deleted or replaced): a later pin raises EBADF."""
        with self.cache._lock:
            self.retired = True
            self._close_locked()

    def _close_locked(self) -> None:
        if self.fd is None:
            return
        if self.pins:
            self.close_pending = True
        else:
            self.cache._close(self)


# The process's descriptors are one budget, so every log file shares one cache.
FILES = FileCache()
