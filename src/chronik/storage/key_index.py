# The per-key version index of one partition (topics with key.versioning.enable): for each
# key, how many records it has had (its version count) and the (version, offset) of each
# of its records still in the log. File: key-versions.db in the partition directory, an
# SQLite 3 database (journal_mode=WAL, synchronous=NORMAL), with its -wal and -shm files:
#
#   meta(name TEXT PRIMARY KEY, value INTEGER)
#       format     FORMAT (2); a file without it (format 1 kept a separate keys(key, count)
#                  table) is rebuilt from the log
#       end        the next log offset to index: every batch below it is in the index
#       pruned     rows below it hold, per key, only what compaction kept
#       maintained 1 while the topic opts in; 0 once it opted out (the file is kept but no
#                  longer follows the log, so opting in again rebuilds it)
#       floor      0, or the offset a follower's log started over at (its leader had
#                  deleted what it lacked): the counts of keys whose records all lay below
#                  it are still to be copied from the leader (placeholder rows, below)
#   events(key BLOB, version INTEGER, offset INTEGER, PRIMARY KEY (key, version))
#       WITHOUT ROWID, plus an index on offset
#
# A key's version count is not stored apart: it is its greatest version plus one, one
# B-tree seek on the primary key (a row per record is one B-tree insert into the primary
# key and one append to the offset index, nothing else). Every change keeps each key's
# greatest row so counts stay exact:
#   - appends add rows with versions above every row of the key;
#   - retention and DeleteRecords remove the rows below the new log start except each
#     key's greatest one (its record is gone, its number stays used); reads and rows()
#     skip rows below the log start;
#   - compaction removes only rows older than a kept row of the same key;
#   - truncation to an offset removes the rows at or past it; the key's count is then its
#     greatest remaining version plus one, which is exact because every record between the
#     log start and the index end has its row and the greatest row below the start is
#     kept; a key left with no row but whose removed rows did not start at version 0 (its
#     earlier records were never indexed here, e.g. compacted away before the index was
#     built) keeps its count in a placeholder row (key, lowest removed version - 1, -1),
#     below every log start.
#
# Each appended batch is one SQLite transaction (its event rows and end). The log is the
# truth: versions are stamped into the records themselves (the chronik-version header,
# chronik.records.versions), so the index can always be rebuilt from the log. At open it
# is made to agree with the log: an end past the log end is truncated back (rows at or
# past it removed); an end below it indexes the log tail from the records' headers; a
# missing, unreadable, old-format or unmaintained file is rebuilt from the whole log with
# one warning.
#
# Why SQLite: it is in the standard library (no new dependency), keeps the data on disk
# behind a bounded page cache (memory does not grow with the number of keys), gives
# atomic transactions and survives kill -9 with WAL. RocksDB through a binding buys little
# at this size and brings a native dependency. Memory per open index: SQLite's page cache
# (cache_size below) plus an LRU of at most HOT_KEYS counts.
from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("chronik.storage")

FILE_NAME = "key-versions.db"
FILES = (FILE_NAME, FILE_NAME + "-wal", FILE_NAME + "-shm", FILE_NAME + "-journal")
HOT_KEYS = 4096
CACHE_KIB = 2048
FORMAT = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    key BLOB NOT NULL, version INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (key, version)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_offset ON events(offset);
"""
_COUNT = "SELECT version FROM events WHERE key = ? ORDER BY version DESC LIMIT 1"
# Rows go in INSERT statements of up to _ROWS_PER_INSERT rows each, bound to one flat list
# (base offset, then key, version, offset delta of each row): far less work per row than
# one statement per row. Plain INSERT is the fast path; a (key, version) already indexed
# (a log holding one version twice, which a rebuild can meet) retries the transaction
# with INSERT OR REPLACE, the newer row winning.
_ROWS_PER_INSERT = 100


@functools.lru_cache(maxsize=2 * _ROWS_PER_INSERT)
def _insert_sql(rows: int, replace: bool) -> str:
    values = ",".join(f"(?{3 * i + 2},?{3 * i + 3},?1+?{3 * i + 4})" for i in range(rows))
    return f"INSERT{' OR REPLACE' if replace else ''} INTO events VALUES {values}"


_SET_META = "INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)"


class KeyIndex:
    """One partition's key index. Not thread-safe: used on the thread that owns the log."""

    def __init__(self, path: Path, hot_keys: int = HOT_KEYS) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            self._db.executescript(_SCHEMA)
            meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.Error:
            self._db.close()
            raise
        self._end = int(meta.get("end", 0))
        self._pruned = int(meta.get("pruned", 0))
        self.maintained = bool(meta.get("maintained", 0))
        self.format = int(meta.get("format", 1))
        self.floor = int(meta.get("floor", 0))
        self.start = 0  # the log start offset: rows below it are not returned
        self._hot: OrderedDict[bytes, int] = OrderedDict()
        self._hot_max = hot_keys
        self.closed = False
        # Known not to agree with the log (a truncation of it failed): rebuilt before use.
        self.stale = False

    @classmethod
    def create(cls, directory: Path, hot_keys: int = HOT_KEYS) -> KeyIndex:
        """A new, empty index in ``directory`` (any old file removed)."""
        remove_files(directory)
        index = cls(directory / FILE_NAME, hot_keys)
        index._commit([], {"format": FORMAT, "end": 0, "pruned": 0, "maintained": 1})
        return index

    # -- queries ----------------------------------------------------------------------------
    @property
    def end(self) -> int:
        """The next log offset to index."""
        return self._end

    def version_count(self, key: bytes) -> int:
        """How many records ``key`` has had in the partition (its next version)."""
        hot = self._hot.get(key)
        if hot is not None:
            self._hot.move_to_end(key)
            return hot
        row = self._db.execute(_COUNT, (key,)).fetchone()
        found = row[0] + 1 if row is not None else 0
        self._remember(key, found)
        return found

    def events(
        self, key: bytes, from_version: int = 0, limit: int | None = None
    ) -> list[tuple[int, int]]:
        """(version, offset) of the key's records still in the log, ascending by version."""
        sql = (
            "SELECT version, offset FROM events WHERE key = ? AND version >= ? AND offset >= ? "
            "ORDER BY version"
        )
        args: tuple[object, ...] = (key, max(0, from_version), self.start)
        if limit is not None:
            sql += " LIMIT ?"
            args += (max(0, limit),)
        return self._db.execute(sql, args).fetchall()

    def keys_count(self) -> int:
        """How many keys have a version count (deleted records' keys included)."""
        return self._db.execute("SELECT count(DISTINCT key) FROM events").fetchone()[0]

    def rows(self) -> list[tuple[bytes, int, int]]:
        """Every (key, version, offset) row of a record in the log, by offset (tests and
        checks)."""
        sql = "SELECT key, version, offset FROM events WHERE offset >= ? ORDER BY offset"
        return self._db.execute(sql, (self.start,)).fetchall()

    def counts(self) -> dict[bytes, int]:
        sql = "SELECT key, max(version) + 1 FROM events GROUP BY key"
        return dict(self._db.execute(sql).fetchall())

    # -- updates ----------------------------------------------------------------------------
    def record_batch(
        self, rows: list[bytes | int], base: int, end: int, counts: dict[bytes, int]
    ) -> None:
        """Index records: ``rows`` flat, key, version and offset delta from ``base`` of
        each (as chronik.records.versions stamps a batch's); ``counts`` each key's version
        count after them; the log now ends at ``end``. One transaction; raises
        sqlite3.Error (nothing changed) if it fails."""
        self._commit(rows, {"end": end}, base)
        hot = self._hot
        for key, n in counts.items():
            if key in hot and n > hot[key]:
                hot[key] = n

    def advance(self, end: int) -> None:
        """Batches up to ``end`` held nothing to index; saved with the next commit."""
        self._end = max(self._end, end)

    def _commit(self, rows: list[bytes | int], meta: dict[str, int], base: int = 0) -> None:
        try:
            with self._transaction():
                self._insert(rows, base, replace=False)
                self._db.executemany(_SET_META, list(meta.items()))
        except sqlite3.IntegrityError:
            with self._transaction():
                self._insert(rows, base, replace=True)
                self._db.executemany(_SET_META, list(meta.items()))
        if "end" in meta:
            self._end = meta["end"]
        if "pruned" in meta:
            self._pruned = meta["pruned"]
        if "maintained" in meta:
            self.maintained = bool(meta["maintained"])
        if "floor" in meta:
            self.floor = meta["floor"]

    def _insert(self, rows: list[bytes | int], base: int, replace: bool) -> None:
        db = self._db
        step = 3 * _ROWS_PER_INSERT
        whole = len(rows) - len(rows) % step
        if whole:
            db.executemany(
                _insert_sql(_ROWS_PER_INSERT, replace),
                [[base, *rows[at : at + step]] for at in range(0, whole, step)],
            )
        if whole < len(rows):
            db.execute(_insert_sql((len(rows) - whole) // 3, replace), [base, *rows[whole:]])

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction, joining the one begin() opened."""
        db = self._db
        if not db.in_transaction:
            db.execute("BEGIN")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def begin(self) -> None:
        """Open the transaction a batch's version lookups and its rows share: lookups in
        it read one WAL snapshot instead of opening one each (4-7 µs against 1.5 per
        lookup); record_batch commits it, release() ends it if nothing is written."""
        if not self._db.in_transaction:
            self._db.execute("BEGIN")

    def release(self) -> None:
        """End the read transaction version lookups opened, if no write followed them (a
        refused batch)."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _remember(self, key: bytes, count: int) -> None:
        self._hot[key] = count
        self._hot.move_to_end(key)
        while len(self._hot) > self._hot_max:
            self._hot.popitem(last=False)

    def truncate(self, end: int) -> None:
        """The log was cut to ``end``: rows at or past it go, and each key they belonged to
        counts again what is left before ``end`` (its newest row below, plus one; else its
        smallest removed version, kept in a placeholder row: its earlier records are gone
        from the index too)."""
        db = self._db
        removed = db.execute(
            "SELECT key, min(version) FROM events WHERE offset >= ? GROUP BY key", (end,)
        ).fetchall()
        placeholders = []
        for key, lowest in removed:
            row = db.execute(
                "SELECT 1 FROM events WHERE key = ? AND offset < ? LIMIT 1", (key, end)
            ).fetchone()
            if row is None and lowest > 0:
                placeholders.append((key, lowest - 1, -1))
        with self._transaction():
            db.execute("DELETE FROM events WHERE offset >= ?", (end,))
            db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?)", placeholders)
            db.executemany(
                _SET_META, [("end", end), ("pruned", min(self._pruned, end))]
            )
        self._end = end
        self._pruned = min(self._pruned, end)
        self._hot.clear()

    def drop_below(self, start: int) -> None:
        """The log now starts at ``start`` (retention, DeleteRecords): rows below it go
        but each key's greatest, so counts stay."""
        self.start = max(self.start, start)
        db = self._db
        with self._transaction():
            db.execute(
                "DELETE FROM events WHERE offset < ? AND version < ("
                "  SELECT max(e.version) FROM events e WHERE e.key = events.key)",
                (start,),
            )
            if start > self._end:
                db.execute(_SET_META, ("end", start))
        self._end = max(self._end, start)

    def prune_compacted(self, through: int) -> None:
        """Compaction cleaned the log below ``through``, keeping only each key's newest
        record there: the rows of the records it removed go (counts stay). Only keys with
        rows between the previous pass's point and ``through`` are looked at."""
        if through <= self._pruned:
            return
        db = self._db
        with self._transaction():
            db.execute(
                "DELETE FROM events WHERE key IN ("
                "  SELECT DISTINCT key FROM events WHERE offset >= ? AND offset < ?)"
                " AND offset < ? AND version < ("
                "  SELECT max(e.version) FROM events e WHERE e.key = events.key AND e.offset < ?)",
                (self._pruned, through, through, through),
            )
            db.execute(_SET_META, ("pruned", through))
        self._pruned = through

    # -- counts of keys whose records are all deleted, between replicas ----------------------
    def counts_below(
        self, below: int, after: bytes | None, limit: int
    ) -> list[tuple[bytes, int]]:
        """(key, version count) of keys with rows below offset ``below``, by key, from the
        first key past ``after``, at most ``limit``: what a follower starting over at
        ``below`` cannot learn from the records it fetches. Below the log start a key
        keeps one row, so this walks about as many rows as it returns."""
        first = "key >= ?" if after is None else "key > ?"  # b"" is a key too
        sql = (
            f"SELECT key, max(version) + 1 FROM events WHERE {first} AND offset < ? "
            "GROUP BY key ORDER BY key LIMIT ?"
        )
        args = (b"" if after is None else after, below, max(1, limit))
        return self._db.execute(sql, args).fetchall()

    def raise_counts(self, counts: list[tuple[bytes, int]], floor_done: bool) -> None:
        """Counts copied from the leader: each key whose own count is lower gets a
        placeholder row (key, count - 1, -1), below every log start, so its next version
        is ``count``. With ``floor_done`` the copy is complete (floor back to 0). One
        transaction."""
        rows: list[bytes | int] = []
        for key, count in counts:
            if count > self.version_count(key):
                rows += (key, count - 1, -1)
        self._commit(rows, {"floor": 0} if floor_done else {})
        hot = self._hot
        for key, count in counts:
            if key in hot and count > hot[key]:
                hot[key] = count

    def set_floor(self, offset: int) -> None:
        self._commit([], {"floor": offset})

    def set_maintained(self, maintained: bool) -> None:
        self._commit([], {"maintained": int(maintained)})

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(sqlite3.Error):
            self._db.close()


def remove_files(directory: Path) -> None:
    for name in FILES:
        (directory / name).unlink(missing_ok=True)
