"""What the chaos checker finds: anomalies, each named precisely (which value, partition,
offset, broker), and the run's figures. ``report.json`` (``Report.save``) holds
``{"ok", "anomalies": [{"kind", "message"}], "figures": {...}, "notes": [text]}``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The most anomalies of one kind a summary spells out; the rest are counted.
SHOWN_PER_KIND = 15


@dataclass(frozen=True)
class Anomaly:
    kind: str
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    # What is worth knowing but breaks no promise (a commit that may have landed late).
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def add(self, kind: str, message: str) -> None:
        self.anomalies.append(Anomaly(kind, message))

    def kinds(self) -> Counter[str]:
        return Counter(a.kind for a in self.anomalies)

    def summary(self) -> str:
        lines = [f"{'OK' if self.ok else 'FAILED'}: {len(self.anomalies)} anomalies"]
        for name, value in self.figures.items():
            lines.append(f"  {name}: {json.dumps(value, sort_keys=True)}")
        shown: Counter[str] = Counter()
        for a in self.anomalies:
            shown[a.kind] += 1
            if shown[a.kind] <= SHOWN_PER_KIND:
                lines.append(f"  {a}")
        for kind, count in self.kinds().items():
            if count > SHOWN_PER_KIND:
                lines.append(f"  [{kind}] ... and {count - SHOWN_PER_KIND} more")
        lines += [f"  note: {n}" for n in self.notes[:SHOWN_PER_KIND]]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "anomalies": [{"kind": a.kind, "message": a.message} for a in self.anomalies],
            "figures": self.figures,
            "notes": self.notes,
        }

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, sort_keys=True))
