# The saved log start offset of one partition: `log-start-offset` in its directory, the
# offset in decimal and a newline. Present only once DeleteRecords (or a follower
# starting over at its leader's log start) moved the start inside the first segment;
# otherwise the start is the first segment's base offset. Replaced by tmp + fsync + rename
# + directory fsync, so a DeleteRecords answered is never forgotten; a crash may leave
# `log-start-offset.tmp`, which the next open removes. Text that is not a number reads as
# -1, which the loader's bounds turn into the first segment's base offset.
from __future__ import annotations

import os
from pathlib import Path

from chronik.storage.diskio import fsync_dir

FILE_NAME = "log-start-offset"


def read(directory: Path) -> int | None:
    """The saved start offset; None if there is no file, -1 if it holds no number."""
    path = directory / FILE_NAME
    if not path.exists():
        return None
    try:
        return int(path.read_text().strip())
    except ValueError:
        return -1


def write(directory: Path, offset: int) -> None:
    """Save ``offset`` durably; raises OSError (no .tmp left behind) if that fails."""
    path = directory / FILE_NAME
    tmp = path.with_name(FILE_NAME + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(f"{offset}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
