"""A coordinator partition whose load failed is loaded again while this broker leads it,
instead of answering NOT_COORDINATOR until leadership moves."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from chronik.cluster import node as cluster_node
from chronik.cluster.node import ClusterNode


class FlakyCoordinator:
    """Fails to load a partition ``failures`` times, then loads it."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.loaded: set[int] = set()

    async def load_partition(self, partition: int) -> None:
        self.attempts += 1
        if self.attempts > self.failures:
            self.loaded.add(partition)

    def is_loaded(self, partition: int) -> bool:
        return partition in self.loaded


def test_a_failed_load_is_tried_again_until_it_succeeds(monkeypatch):
    monkeypatch.setattr(cluster_node, "REGISTER_RETRY_SECONDS", 0.01)
    coordinator = FlakyCoordinator(failures=3)
    node = SimpleNamespace(_stopping=False)
    asyncio.run(ClusterNode._load(node, coordinator, 7, {7}))  # type: ignore[arg-type]
    assert coordinator.attempts == 4 and coordinator.is_loaded(7)


def test_loading_stops_once_the_partition_is_no_longer_led(monkeypatch):
    monkeypatch.setattr(cluster_node, "REGISTER_RETRY_SECONDS", 0.01)
    coordinator = FlakyCoordinator(failures=1_000_000)
    led = {7}
    node = SimpleNamespace(_stopping=False)

    async def scenario() -> None:
        task = asyncio.create_task(ClusterNode._load(node, coordinator, 7, led))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        led.discard(7)
        await asyncio.wait_for(task, 15)

    asyncio.run(scenario())
    assert not coordinator.is_loaded(7) and coordinator.attempts >= 2
