"""Writes that either complete or raise.

``os.write`` to a regular file returns a short count when the disk fills part way through;
the rest then fails with ENOSPC. Callers cut the file back to its size before the write
(see LogSegment.append), so the bytes of a failed write never stay in a file.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` or raise OSError (some of it may be on disk then)."""
    view = memoryview(data)
    written = os.write(fd, view)
    while written < len(view):
        n = os.write(fd, view[written:])
        if n == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += n


def fsync_dir(path: os.PathLike[str] | str) -> None:
    """Make the names in a directory (a create, rename or unlink) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Make ``path`` hold ``data``, whole or not at all: written beside, fsynced, renamed
    over it, the directory fsynced. On a full disk the old file stays and no half-written
    copy is left."""
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
