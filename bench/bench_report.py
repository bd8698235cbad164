"""The JSON report the cluster benches write to bench/results/: when the run started,
quick or full, its settings, the chronik revision, the machine (with the load average at
start and end) and the results; named ``<name>-<UTC time>[-quick].json``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from broker_bench import chronik_revision, machine

RESULTS_DIR = Path(__file__).resolve().parent / "results"


class Run:
    """Started at construction; ``write`` once the results are in."""

    def __init__(self, name: str, quick: bool) -> None:
        self.name = name
        self.quick = quick
        self.started = time.time()
        self.load_at_start = os.getloadavg()

    def write(self, settings: dict[str, Any], results: Any, output: Path | None = None,
              **extra: Any) -> Path:
        report = {
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "mode": "quick" if self.quick else "full",
            "settings": settings,
            **extra,
            "version": chronik_revision(),
            "machine": {**machine(), "load_avg_at_start": self.load_at_start,
                        "load_avg_at_end": os.getloadavg()},
            "results": results,
        }
        path = output or RESULTS_DIR / time.strftime(
            f"{self.name}-%Y%m%d-%H%M%S{'-quick' if self.quick else ''}.json",
            time.gmtime(self.started),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        return path
