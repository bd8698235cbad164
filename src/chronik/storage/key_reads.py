"""Reading one key's records (topics with key.versioning.enable) at a cost proportional to
that key's events: the key index (chronik.storage.key_index) gives their offsets, and each
distinct batch holding one of them is read once (one offset index lookup and one pread)
and decoded. Offsets below the log start, past its end, or that no longer hold a record
(removed by compaction) are skipped."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from chronik.records.reader import CorruptRecords, DecodedRecord, iter_records

if TYPE_CHECKING:
    from chronik.storage.partition_log import PartitionLog


def read_records(log: PartitionLog, offsets: Iterable[int]) -> list[DecodedRecord]:
    """The records at ``offsets`` still in the log, ascending by offset."""
    wanted = sorted({o for o in offsets if log.start_offset <= o < log.end_offset})
    out: list[DecodedRecord] = []
    i = 0
    while i < len(wanted):
        found = log.batch_at(wanted[i])
        if found is None:
            break  # nothing at or past this offset
        batch, last = found
        take = set()
        while i < len(wanted) and wanted[i] <= last:  # wanted[i] at least: never empty
            take.add(wanted[i])
            i += 1
        try:
            out.extend(iter_records(batch, only=take))
        except CorruptRecords:
            continue
    return out


def read_events(
    log: PartitionLog, key: bytes, from_version: int = 0, limit: int | None = None
) -> list[tuple[int, DecodedRecord]]:
    """(version, record) of ``key``'s records from ``from_version``, at most ``limit`` rows
    of the index looked at (fewer records come back where compaction removed some).
    Empty when the topic does not opt in."""
    index = log.key_index
    if index is None:
        return []
    rows = index.events(key, from_version, limit)
    by_offset = {r.offset: r for r in read_records(log, (offset for _, offset in rows))}
    return [(v, by_offset[o]) for v, o in rows if o in by_offset and by_offset[o].key == key]
