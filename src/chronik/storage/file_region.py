"""A run of a segment file's bytes, sent to a socket as they lie on disk.

A Fetch response on a plaintext connection names one in place of a partition's record
bytes: the connection hands it to sendfile(2), so the batches go from the page cache to
the socket without a read into Python and a copy back out (as Kafka's FileRecords.writeTo
does with transferTo). What sendfile cannot take at once (the socket's buffer is full)
is read and queued as bytes, like any other part of a response.

The file is pinned only while a call uses it, and reopened if the file cache closed it
meanwhile. A file shortened or retired since the fetch was answered raises OSError: the
response already states the region's size, and the caller can only close the connection,
as Kafka does when a FileRecords was truncated during a write.
"""

from __future__ import annotations

import errno
import os

from chronik.storage.file_cache import CachedFile


class FileRegion:
    """``size`` bytes of ``file`` from ``position``; its len() is its size."""

    __slots__ = ("file", "position", "size")

    def __init__(self, file: CachedFile, position: int, size: int) -> None:
        self.file = file
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def send(self, sock_fd: int) -> int:
        """Send from the start with sendfile(2) until all is sent or the socket would
        block; the bytes sent."""
        sent = 0
        size = self.size
        with self.file as fd:
            while sent < size:
                try:
                    n = os.sendfile(sock_fd, fd, self.position + sent, size - sent)
                except BlockingIOError:
                    break
                if n == 0:
                    raise self._shortened()
                sent += n
        return sent

    def read(self, start: int = 0) -> bytes:
        """The bytes from ``start`` (relative to the region) to its end."""
        with self.file as fd:
            data = os.pread(fd, self.size - start, self.position + start)
        if len(data) != self.size - start:
            raise self._shortened()
        return data

    def _shortened(self) -> OSError:
        return OSError(errno.EIO, f"{self.size} bytes at {self.position} no longer there",
                       str(self.file.path))

    def __repr__(self) -> str:
        return f"FileRegion({self.file.path.name}, {self.position}, {self.size})"
