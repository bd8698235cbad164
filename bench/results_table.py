"""The bench's text table: one line per figure, each broker's value and chronik/tansu."""

from __future__ import annotations

ROWS = [
    ("produce-1p-acks-1", "produce 1 partition, acks=1"),
    ("produce-1p-acks-all", "produce 1 partition, acks=all"),
    ("produce-6p-acks-1", "produce 6 partitions, acks=1"),
    ("produce-6p-acks-all", "produce 6 partitions, acks=all"),
    ("produce-1p-acks-1-16k", "produce 1 partition, acks=1, 16 KB batches"),
    ("produce-6p-acks-all-16k", "produce 6 partitions, acks=all, 16 KB batches"),
    ("consume-1p", "consume 1 partition"),
    ("consume-6p", "consume 6 partitions"),
    ("latency-1p-acks-1", "produce latency, acks=1"),
    ("latency-1p-acks-all", "produce latency, acks=all"),
]

THROUGHPUT_METRICS = [
    ("records_per_s", "records/s", "{:,.0f}"),
    ("mb_per_s", "MB/s", "{:,.1f}"),
    ("broker_cores", "broker CPU (cores)", "{:.2f}"),
    ("broker_cpu_us_per_record", "broker CPU us/record", "{:.3f}"),
]
PRODUCE_METRICS = [
    *THROUGHPUT_METRICS,
    ("load_p50_ms", "latency under load p50 ms", "{:,.2f}"),
    ("load_p99_ms", "latency under load p99 ms", "{:,.2f}"),
]
LATENCY_METRICS = [
    ("p50_ms", "p50 ms", "{:,.2f}"),
    ("p99_ms", "p99 ms", "{:,.2f}"),
    ("broker_cores", "broker CPU (cores)", "{:.2f}"),
]


def _cell(row: dict | None, key: str, fmt: str) -> str:
    if row is None:
        return "-"
    if "error" in row:
        return "error"
    value = row.get(key)
    return "-" if value is None else fmt.format(value)


def _ratio(
    results: dict[str, dict[str, dict]], row_id: str, key: str, other: str = "tansu"
) -> str:
    try:
        chronik = results["chronik"][row_id][key]
        peer = results[other][row_id][key]
    except KeyError:
        return "-"
    return f"{chronik / peer:.2f}" if peer else "-"


def render_table(results: dict[str, dict[str, dict]], names: list[str], latency_rate: int) -> str:
    peers = [p for p in ("tansu", "baseline") if p in names]
    headers = ["workload", "metric", *names, *(f"chronik/{p}" for p in peers)]
    lines: list[list[str]] = []
    errors: list[str] = []
    for row_id, label in ROWS:
        latency = row_id.startswith("latency")
        if latency:
            metrics = LATENCY_METRICS
        elif row_id.startswith("produce"):
            metrics = PRODUCE_METRICS
        else:
            metrics = THROUGHPUT_METRICS
        if latency:
            label = f"{label} @ {latency_rate:,}/s"
        for i, (key, metric, fmt) in enumerate(metrics):
            cells = [_cell(results.get(n, {}).get(row_id), key, fmt) for n in names]
            ratios = [
                "" if key.startswith("broker_") else _ratio(results, row_id, key, p)
                for p in peers
            ]
            lines.append([label if i == 0 else "", metric, *cells, *ratios])
        errors.extend(
            f"{row_id} on {n}: {results[n][row_id]['error']}"
            for n in names
            if "error" in results[n].get(row_id, {})
        )
    out = _aligned(headers, lines)
    out.append("ratio > 1 is chronik faster for throughput, chronik slower for latency")
    out.append(
        "latency under load: a second producer at a fixed low rate (linger.ms=0) beside the load"
    )
    out.extend(f"error: {e}" for e in errors)
    return "\n".join(out)


CLUSTER_METRICS = [
    ("records_per_s", "records/s", "{:,.0f}"),
    ("mb_per_s", "MB/s", "{:,.1f}"),
    ("broker_cores", "broker CPU (cores, all brokers)", "{:.2f}"),
    ("client_cores", "producer CPU (cores, all processes)", "{:.2f}"),
]


def render_cluster_table(
    results: dict[str, dict[str, dict]],
    names: list[str],
    ratios: dict[str, dict[str, float | None]],
) -> str:
    """cluster_bench.py's table: one block per acks setting, the ratios on its first line."""
    headers = ["workload", "metric", *names, "cluster/single", "cluster/tansu"]
    lines: list[list[str]] = []
    errors: list[str] = []
    for acks in ("1", "all"):
        row_id = f"acks-{acks}"
        for i, (key, metric, fmt) in enumerate(CLUSTER_METRICS):
            cells = [_cell(results.get(n, {}).get(row_id), key, fmt) for n in names]
            shown = ["", ""]
            if i == 0:
                shown = [
                    "-" if (r := ratios.get(row_id, {}).get(k)) is None else f"{r:.2f}"
                    for k in ("cluster/single", "cluster/tansu")
                ]
            lines.append([f"produce, acks={acks}" if i == 0 else "", metric, *cells, *shown])
        errors.extend(
            f"{row_id} on {n}: {str(results[n][row_id]['error']).splitlines()[0]}"
            for n in names
            if "error" in results.get(n, {}).get(row_id, {})
        )
    out = _aligned(headers, lines)
    out.append("cluster: 3 chronik brokers and ZooKeeper; single: 1 chronik broker; ratios > 1:")
    out.append("the cluster is faster")
    out.extend(f"error: {e}" for e in errors)
    return "\n".join(out)


def _aligned(headers: list[str], lines: list[list[str]]) -> list[str]:
    """Header, rule and rows: the first two columns left-aligned, the figures right."""
    widths = [max(len(r[i]) for r in [headers, *lines]) for i in range(len(headers))]

    def fmt_line(cells: list[str]) -> str:
        first, second, *rest = cells
        return "  ".join(
            [first.ljust(widths[0]), second.ljust(widths[1])]
            + [c.rjust(w) for c, w in zip(rest, widths[2:], strict=True)]
        )

    return [fmt_line(headers), "  ".join("-" * w for w in widths), *map(fmt_line, lines)]
