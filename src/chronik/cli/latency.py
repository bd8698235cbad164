"""Latency summaries (avg and nearest-rank percentiles) in milliseconds."""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (50, 95, 99, 99.9)


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    if not seconds:
        return {}
    ordered = sorted(seconds)
    summary = {"avg": 1000 * sum(ordered) / len(ordered), "max": 1000 * ordered[-1]}
    for p in PERCENTILES:
        rank = max(math.ceil(p / 100 * len(ordered)) - 1, 0)
        summary[f"p{p:g}"] = 1000 * ordered[rank]
    return summary
