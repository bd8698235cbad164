"""The replication gauges read the cluster's replica manager, and are zero on one node."""

from __future__ import annotations

from types import SimpleNamespace

from chronik.broker.metrics import Metrics


def rendered(cluster: object) -> dict[str, str]:
    lines: list[str] = []
    kinds: dict[str, str] = {}

    def family(name: str, kind: str, text: str) -> None:
        kinds[name] = kind

    Metrics(SimpleNamespace(cluster=cluster))._render_replication(lines, family)
    values = dict(line.split(" ") for line in lines)
    assert set(values) == set(kinds)
    return values


def test_replication_metrics_come_from_the_replica_manager() -> None:
    replicas = SimpleNamespace(
        under_replicated=lambda: 3, isr_shrinks=5, isr_expands=4, max_lag=lambda: 1200
    )
    assert rendered(SimpleNamespace(replicas=replicas)) == {
        "chronik_under_replicated_partitions": "3",
        "chronik_isr_shrinks_total": "5",
        "chronik_isr_expands_total": "4",
        "chronik_replica_max_lag": "1200",
    }


def test_replication_metrics_are_zero_without_replicas() -> None:
    for cluster in (None, SimpleNamespace()):
        assert set(rendered(cluster).values()) == {"0"}
