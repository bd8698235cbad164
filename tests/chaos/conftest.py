"""Fixtures of the fault tests: a chaos cluster on a private network, skipped (with the
reason) on a machine that cannot host one: not root, no network namespaces, or no
ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from chronik.cluster.zookeeper_process import zookeeper_classpath

from .cluster import ChaosCluster
from .net import usable


def skip_reason() -> str | None:
    why = usable()
    if why is not None:
        return why
    if zookeeper_classpath() is None:
        return "ZooKeeper is not installed (scripts/install-test-deps.sh)"
    return None


@pytest.fixture
def chaos_cluster(tmp_path: Path) -> Iterator[object]:
    """``chaos_cluster(brokers=3, clients=2, config=None, **kw)``: a started cluster,
    closed (processes, disks, namespaces) at teardown."""
    why = skip_reason()
    if why is not None:
        pytest.skip(f"fault tests: {why}")
    made: list[ChaosCluster] = []

    def make(
        brokers: int = 3, clients: int = 2, config: Mapping[str, str] | None = None, **kw: object
    ) -> ChaosCluster:
        cluster = ChaosCluster(
            tmp_path / f"cluster-{len(made)}", brokers, clients, config, **kw  # type: ignore[arg-type]
        )
        made.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()
