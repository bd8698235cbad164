"""Plain aligned columns, the way Kafka's admin tools print them."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
