# Leader epoch cache of one partition, Kafka's leader-epoch-checkpoint file (KIP-101):
#   {topic}-{partition}/leader-epoch-checkpoint, text:
#     "0\n"                          version
#     "<count>\n"                    number of entries
#     "<epoch> <start_offset>\n"     per entry, both ascending
# An entry says that the leader of ``epoch`` wrote its first batch at ``start_offset``;
# an epoch ends where the next one starts (the last one at the log end offset).
# Rewritten whole on every change as tmp + fsync + rename + directory fsync, so it is
# always one complete version. A file that cannot be read (torn by hand, unknown version)
# leaves the cache empty with one warning: the broker keeps serving, and a follower
# falls back to its high watermark until new epochs are assigned.
#
# The semantics are those of Kafka's LeaderEpochFileCache: assign() keeps entries
# monotonic in both epoch and start offset by dropping conflicting later entries.
from __future__ import annotations

import logging
import os
from pathlib import Path

from chronik.storage.diskio import fsync_dir, write_all

log = logging.getLogger("chronik.storage")

CHECKPOINT = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED = (-1, -1)  # Kafka's (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)



def parse(text: str) -> list[tuple[int, int]]:
    """The entries of a checkpoint file's text; ValueError if it is not one."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or int(lines[0]) != VERSION:
        raise ValueError("missing or unknown version")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ValueError(f"expected {count} entries, found {len(lines) - 2}")
    entries = []
    for line in lines[2:]:
        fields = line.split(" ")
        if len(fields) != 2:
            raise ValueError(f"malformed entry {line!r}")
        epoch, start = int(fields[0]), int(fields[1])
        if epoch < 0 or start < 0:
            raise ValueError(f"negative entry {line!r}")
        entries.append((epoch, start))
    return entries


def format_entries(entries: list[tuple[int, int]]) -> str:
    body = "".join(f"{e} {s}\n" for e, s in entries)
    return f"{VERSION}\n{len(entries)}\n{body}"


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / CHECKPOINT
        self.entries: list[tuple[int, int]] = []
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("partition %s: %s unreadable (%s); starting with no leader epochs",
                        directory.name, CHECKPOINT, exc)
            return
        try:
            loaded = parse(text)
        except ValueError as exc:
            log.warning("partition %s: %s is corrupt (%s); starting with no leader epochs",
                        directory.name, CHECKPOINT, exc)
            return
        # Through the same rule as assign(), as Kafka loads it: a hand-edited file out of
        # order still yields monotonic entries.
        for epoch, start in loaded:
            self.entries = _assigned(self.entries, epoch, start) or self.entries

    # -- queries ------------------------------------------------------------------------
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (largest known epoch <= ``epoch``, the start offset of the
        next known epoch), or (latest, ``log_end_offset``) for the latest epoch. An epoch
        below every known one answers (``epoch``, first start offset): the data before
        it is gone and a follower restarts from there. UNDEFINED for an empty cache,
        epoch -1, or an epoch above the latest."""
        entries = self.entries
        if epoch < 0 or not entries:
            return UNDEFINED
        if entries[-1][0] == epoch:
            return epoch, log_end_offset
        floor: tuple[int, int] | None = None
        for entry in entries:
            if entry[0] > epoch:
                if floor is None:
                    return epoch, entry[1]
                return floor[0], entry[1]
            floor = entry
        return UNDEFINED

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the leader that wrote ``offset`` (-1 when unknown)."""
        found = -1
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    # -- changes ------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> None:
        """A batch of leader ``epoch`` starts at ``start_offset``. Nothing changes (and
        nothing is written) for the current epoch at or after its start; otherwise later
        entries that conflict (epoch or start offset not below the new one) are dropped
        and the entry appended. Raises OSError, with the cache unchanged, if the file
        cannot be written."""
        entries = self.entries
        if entries:
            last_epoch, last_start = entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return
        if epoch < 0 or start_offset < 0:
            return  # a batch from before leader epochs (partitionLeaderEpoch -1)
        new = _assigned(entries, epoch, start_offset)
        if new is None:
            return
        dropped = len(entries) - (len(new) - 1)
        if dropped > 1 or (dropped == 1 and entries[-1][1] != start_offset):
            log.warning(
                "partition %s: leader epoch %d at offset %d drops conflicting entries %s",
                self.directory.name, epoch, start_offset, entries[len(new) - 1 :],
            )
        self._write(new)
        self.entries = new

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was cut there)."""
        entries = self.entries
        if end_offset < 0 or not entries or entries[-1][1] < end_offset:
            return
        kept = [e for e in entries if e[1] < end_offset]
        self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: entries starting at or below it go,
        the last of them kept with its start moved up to ``start_offset``."""
        entries = self.entries
        if start_offset < 0 or not entries or entries[0][1] >= start_offset:
            return
        below = [e for e in entries if e[1] <= start_offset]
        kept = [(below[-1][0], start_offset)] + entries[len(below) :]
        self._replace(kept)

    def clear(self) -> None:
        if self.entries:
            self._replace([])

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        """Truncations take effect in memory even if the file is not rewritten: the log
        was cut already, and recovery at open truncates a stale file the same way."""
        self.entries = entries
        try:
            self._write(entries)
        except OSError as exc:
            log.warning("partition %s: %s not rewritten: %s", self.directory.name,
                        CHECKPOINT, exc.strerror or exc)

    def _write(self, entries: list[tuple[int, int]]) -> None:
        tmp = self.path.with_name(CHECKPOINT + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, format_entries(entries).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)


def _assigned(
    entries: list[tuple[int, int]], epoch: int, start: int
) -> list[tuple[int, int]] | None:
    """The entries after Kafka's assign(epoch, start); None when nothing changes."""
    if epoch < 0 or start < 0:
        return None
    if entries and entries[-1][0] == epoch and start >= entries[-1][1]:
        return None
    keep = len(entries)
    while keep and (entries[keep - 1][0] >= epoch or entries[keep - 1][1] >= start):
        keep -= 1
    return [*entries[:keep], (epoch, start)]
