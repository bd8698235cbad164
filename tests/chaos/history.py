"""The history files of a chaos run: what each worker asked for and what it was told.

Format: one file per writer, ``<out_dir>/history/<worker id>.jsonl``, JSON lines, one
event per line, appended and flushed line by line (a kill -9 can leave at most a torn
last line, which readers skip). Every event has:

- ``time``: wall-clock seconds (``time.time()``; every process of a run is on one
  machine, so times of different files compare);
- ``worker``: the writer's id (``p1``, ``c2``, ``t1``, ``e3``, ``poller``, ``harness``);
- ``kind``: ``producer``, ``consumer``, ``txn``, ``eventstore``, ``poller`` or ``harness``;
- ``type``: as in Jepsen, ``invoke`` (an operation begins), ``ok`` (it happened),
  ``fail`` (it certainly did not), ``info`` (unknown: it may have happened or not), or
  ``event`` for lifecycle lines (``start``, ``stop``, ``assign``, ``recreate``, ...);
- ``op``: the operation (``send``, ``read``, ``commit``, ``txn``, ``append``,
  ``committed``, ``start``, ``stop``, ...), and the operation's own fields, described
  where each kind writes them (chaos.workers, chaos.workload).

Keys and values are the record's bytes decoded as UTF-8 with ``surrogateescape`` (``text``),
so any bytes survive the round trip (``raw``); the workloads write ASCII anyway.

    python -m chaos.history OUT_DIR [WORKER ...]   # every event of the run (or of those
                                                   # workers) in time order, one a line
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

HISTORY_DIR = "history"

Event = dict[str, Any]


def text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "surrogateescape")


def raw(data: str | None) -> bytes | None:
    return None if data is None else data.encode("utf-8", "surrogateescape")


class History:
    """Appends one worker's events to its file; safe to call from several threads
    (librdkafka's delivery callbacks run on the polling thread, not the main one)."""

    def __init__(self, path: Path, worker: str, kind: str) -> None:
        self.path = Path(path)
        self.worker = worker
        self.kind = kind
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, type_: str, op: str, **fields: Any) -> Event:
        event: Event = {
            "time": round(time.time(), 6),
            "worker": self.worker,
            "kind": self.kind,
            "type": type_,
            "op": op,
            **fields,
        }
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is not None:
                # One write per line: a process killed between lines leaves whole lines.
                self._file.write(line)
                self._file.flush()
        return event

    def invoke(self, op: str, **fields: Any) -> Event:
        return self.write("invoke", op, **fields)

    def ok(self, op: str, **fields: Any) -> Event:
        return self.write("ok", op, **fields)

    def fail(self, op: str, **fields: Any) -> Event:
        return self.write("fail", op, **fields)

    def info(self, op: str, **fields: Any) -> Event:
        return self.write("info", op, **fields)

    def event(self, op: str, **fields: Any) -> Event:
        return self.write("event", op, **fields)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_events(path: Path) -> Iterator[Event]:
    """The events of one history file in file order; a line that does not parse (a torn
    last line) is skipped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event


def load_histories(out_dir: Path) -> dict[str, list[Event]]:
    """Worker id -> its events, from every ``*.jsonl`` in the run's history directory."""
    out: dict[str, list[Event]] = {}
    directory = Path(out_dir) / HISTORY_DIR
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.jsonl")):
        out[path.stem] = list(read_events(path))
    return out


def timeline(out_dir: Path, workers: list[str] | None = None) -> Iterator[str]:
    """The run's events merged in time order, each a line: seconds since the first
    event, worker, type, op, and the rest of the event as JSON."""
    events = [e for w, es in load_histories(out_dir).items() if not workers or w in workers
              for e in es]
    events.sort(key=lambda e: e.get("time", 0.0))
    start = events[0].get("time", 0.0) if events else 0.0
    for e in events:
        rest = {k: v for k, v in e.items() if k not in ("time", "worker", "kind", "type", "op")}
        yield (f"{e.get('time', 0.0) - start:10.3f} {e.get('worker', '?'):8} "
               f"{e.get('type', '?'):6} {e.get('op', '?'):10} "
               f"{json.dumps(rest, separators=(',', ':'))}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m chaos.history OUT_DIR [WORKER ...]", file=sys.stderr)
        return 2
    try:
        for line in timeline(Path(args[0]), args[1:]):
            print(line)
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
