"""A chaos run's directory, as the workload writes it and the checker reads it back.

Layout of ``<out_dir>``:

- ``run.json``: ``{"seed", "bootstrap", "started", "stopped", "drained", "topics": {"<role>":
  {"name", "partitions", "config"}}, "groups": {"<role>": "<group id>"}, "workers":
  [{"id", "kind", "node", "argv", "topic", "group"}]}``. Topic roles: ``queue`` (the
  producers' topic, read by the consumer group), ``txn`` (the transactional producers'),
  ``events`` (the event-store writers'); group roles: ``queue`` and ``txn`` (the
  read_committed readers of the transactions topic). ``drained``: whether, once the
  writers had stopped, every group committed up to the end of its partitions before its
  members were stopped.
- ``history/<worker>.jsonl``: the histories (chaos.history), the poller's and the
  harness's among them.
- ``final/``: the final read (chaos.final_read).
- ``logs/<worker>.log``: each worker's own output; ``report.json``: the checker's report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chronik.records.reader import DecodedRecord

from .final_read import FinalRead, pkey, records
from .history import Event, load_histories

META_FILE = "run.json"


def write_meta(out_dir: Path, meta: dict[str, Any]) -> None:
    path = Path(out_dir) / META_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
    tmp.replace(path)


@dataclass
class Run:
    out_dir: Path
    meta: dict[str, Any]
    histories: dict[str, list[Event]]
    final: FinalRead | None

    @classmethod
    def load(cls, out_dir: Path) -> Run:
        out_dir = Path(out_dir)
        meta_path = out_dir / META_FILE
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        return cls(out_dir, meta, load_histories(out_dir), FinalRead.load(out_dir))

    def topic(self, role: str) -> tuple[str, int] | None:
        spec = self.meta.get("topics", {}).get(role)
        return (spec["name"], int(spec["partitions"])) if spec else None

    def group(self, role: str) -> str | None:
        return self.meta.get("groups", {}).get(role)

    def workers(self, kind: str, topic: str | None = None) -> dict[str, list[Event]]:
        """Worker id -> events, of the writers of ``kind`` (on ``topic`` if given; the
        poller and the harness are writers too)."""
        topics = {w["id"]: w.get("topic") for w in self.meta.get("workers", [])}
        return {
            worker: events for worker, events in self.histories.items()
            if events and events[0].get("kind") == kind
            and (topic is None or topics.get(worker) == topic)
        }

    def consumers_of(self, group: str) -> dict[str, list[Event]]:
        ids = {w["id"] for w in self.meta.get("workers", []) if w.get("group") == group
               and w["kind"] == "consumer"}
        return {w: e for w, e in self.histories.items() if w in ids}

    def log(self, topic: str, partition: int) -> list[DecodedRecord]:
        """The partition's records below its high watermark, as its leader's replica holds
        them (any in-sync replica's when the leader's is missing): the final log."""
        if self.final is None:
            return []
        key = pkey(topic, partition)
        info = self.final.partitions.get(key, {})
        replicas = self.final.replicas.get(key, {})
        order = [info.get("leader"), *info.get("isr", []), *replicas]
        for broker in order:
            if broker in replicas:
                return records(replicas[broker], info.get("high_watermark"))
        return []
