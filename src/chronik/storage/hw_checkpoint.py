# The high watermark checkpoint, Kafka's `replication-offset-checkpoint` in the data
# directory, text:
#   0                        version
#   <count>                  number of entries
#   <topic> <partition> <hw> one line per replicated partition stored here
# Replaced as a whole (tmp + fsync + rename + directory fsync), so a crash leaves the old
# file or the new one. A file that cannot be read is ignored with a warning: the high
# watermarks then start at each log's start and catch up with the next fetches.
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from chronik.storage.diskio import fsync_dir

log = logging.getLogger("chronik.storage")

NAME = "replication-offset-checkpoint"
VERSION = 0


# One writer at a time: the periodic write runs on a worker thread, the last one at
# shutdown on the event loop, and both go through the same temporary file.
_WRITING = threading.Lock()


def write(data_dir: Path, entries: Iterable[tuple[str, int, int]]) -> None:
    rows = list(entries)
    text = f"{VERSION}\n{len(rows)}\n" + "".join(f"{t} {p} {hw}\n" for t, p, hw in rows)
    with _WRITING:
        _replace(data_dir, text)


def _replace(data_dir: Path, text: str) -> None:
    path = data_dir / NAME
    tmp = path.with_name(NAME + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(data_dir)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def read(data_dir: Path) -> dict[tuple[str, int], int]:
    path = data_dir / NAME
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s not read (%s); high watermarks start at the log start", path, exc)
        return {}
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, hw = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(hw)
        if len(out) != count:
            raise ValueError(f"{len(out)} entries, {count} announced")
        return out
    except (ValueError, IndexError) as exc:
        log.warning("%s is malformed (%s); high watermarks start at the log start", path, exc)
        return {}
