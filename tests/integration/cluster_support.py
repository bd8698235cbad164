"""A chronik cluster for the cluster tests: N `chronik serve` processes sharing one
ZooKeeper server, each with its own data dir, port and `broker.id` (1..N).

Every cluster lives under its own ZooKeeper chroot, so one ZooKeeper server can hold
many clusters in turn. The ZooKeeper session timeout is short (6 s) so that a killed
broker's ephemeral znodes, and a killed controller's /controller, go away quickly.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from conftest import BrokerProcess

T = TypeVar("T")

SESSION_TIMEOUT_MS = 6000
# Tests fail fast on a cluster that does not converge; failover waits allow for the
# session timeout plus the controller's reaction.
WAIT_TIMEOUT = 60.0

DEFAULT_CONFIG: dict[str, str] = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "10000",
    # Consumers in the tests use short sessions, so a crashed member is noticed quickly.
    "group.min.session.timeout.ms": "1000",
    # A SIGTERM whose controlled shutdown cannot hand everything on (one-replica topics,
    # the controller stopping too) tries max.retries (3) times: with Kafka's 5 s backoff
    # between tries a test that stops brokers spends most of its time in these sleeps.
    "controlled.shutdown.retry.backoff.ms": "500",
}

# The clusters started and not yet closed in this process: a failed test's report ends
# with their brokers' logs (tests/conftest.py), as a cluster that did not converge
# tells why only there.
OPEN: list[Cluster] = []


def wait_until(
    predicate: Callable[[], T], what: str, timeout: float = WAIT_TIMEOUT, interval: float = 0.2
) -> T:
    """Poll `predicate` until it returns something truthy; any exception counts as not yet."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
        except Exception as exc:  # noqa: BLE001 - a cluster in transition answers with errors
            result, last_error = None, exc  # type: ignore[assignment]
        if result:
            return result
        if time.monotonic() > deadline:
            hint = f" (last error: {last_error!r})" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{hint}")
        time.sleep(interval)


def java_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int = 50) -> int:
    """The __consumer_offsets partition of a group (Kafka's Utils.abs(hashCode) % n)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Cluster:
    """Brokers 1..size of one cluster, and a kazoo client on the cluster's chroot."""

    def __init__(
        self,
        base: Path,
        zk_connect: str,
        size: int = 3,
        config: Mapping[str, str] | None = None,
        chroot: str | None = None,
    ) -> None:
        self.base = Path(base)
        self.zk_connect = zk_connect
        self.chroot = chroot or f"/chronik-{uuid.uuid4().hex[:10]}"
        common = {
            **DEFAULT_CONFIG,
            **(config or {}),
            "zookeeper.connect": f"{zk_connect}{self.chroot}",
        }
        self.brokers: dict[int, BrokerProcess] = {
            i: BrokerProcess(self.base / f"broker-{i}" / "data", {**common, "broker.id": str(i)})
            for i in range(1, size + 1)
        }
        for b in self.brokers.values():
            b.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._zk: KazooClient | None = None
        self._admins: dict[int, AdminClient] = {}

    # --- processes -----------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    @property
    def bootstrap(self) -> str:
        """Every broker's address; tests that mean one broker use `broker(i).bootstrap`."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker(self, i: int) -> BrokerProcess:
        return self.brokers[i]

    def start(self, *ids: int, timeout: float = WAIT_TIMEOUT) -> Cluster:
        """Start the given brokers (all when none are given) and wait until each is
        registered, a controller is elected and every running broker's Metadata lists
        every running broker."""
        ids = ids or tuple(self.ids)
        if self not in OPEN:
            OPEN.append(self)
        for i in ids:
            self.brokers[i].start(wait=False)
        for i in ids:
            self.brokers[i].wait_ready(timeout)
        self.wait_settled(timeout)
        return self

    def stop(self, i: int, timeout: float = 30) -> int:
        """SIGTERM: a clean shutdown; returns the exit status."""
        return self.brokers[i].terminate(timeout)

    def kill(self, i: int) -> None:
        """kill -9: no shutdown at all; the broker's session expires in ZooKeeper."""
        self.brokers[i].kill()

    def running(self) -> list[int]:
        return [i for i in self.ids if self.brokers[i].running]

    def wait_settled(self, timeout: float = WAIT_TIMEOUT) -> None:
        up = set(self.running())
        wait_until(lambda: self.live_ids() == up, f"brokers {sorted(up)} registered", timeout)
        wait_until(lambda: self.controller_id() in up, "a live controller", timeout)
        for i in sorted(up):
            wait_until(
                lambda i=i: self.metadata_broker_ids(i) == up,
                f"broker {i}'s Metadata listing brokers {sorted(up)}",
                timeout,
            )

    def close(self) -> None:
        if self in OPEN:
            OPEN.remove(self)
        self._admins.clear()
        for b in self.brokers.values():
            b.kill()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def log_text(self, i: int) -> str:
        return self.brokers[i].log_text()

    # --- ZooKeeper ---------------------------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        """A kazoo client whose paths are relative to the cluster's chroot."""
        if self._zk is None:
            client = KazooClient(hosts=f"{self.zk_connect}{self.chroot}", timeout=10)
            client.start(timeout=15)
            self._zk = client
        return self._zk

    def get_json(self, path: str) -> Any:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def exists(self, path: str) -> bool:
        return self.zk.exists(path) is not None

    def children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def live_ids(self) -> set[int]:
        return {int(c) for c in self.children("/brokers/ids")}

    def controller_id(self) -> int:
        try:
            return int(self.get_json("/controller")["brokerid"])
        except NoNodeError:
            return -1

    def controller_epoch(self) -> int:
        data, _ = self.zk.get("/controller_epoch")
        return int(data)

    def assignment(self, topic: str) -> dict[int, list[int]]:
        """/brokers/topics/<topic>: replica list per partition."""
        doc = self.get_json(f"/brokers/topics/{topic}")
        return {int(p): replicas for p, replicas in doc["partitions"].items()}

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        return self.get_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    # --- what the brokers say -----------------------------------------------------------

    def admin(self, i: int) -> AdminClient:
        """An admin client bootstrapped from broker `i` only. Kept for the cluster's life:
        librdkafka fails the futures of a client that is garbage-collected."""
        if i not in self._admins:
            self._admins[i] = AdminClient({"bootstrap.servers": self.brokers[i].bootstrap})
        return self._admins[i]

    def metadata_broker_ids(self, i: int) -> set[int]:
        md = self.admin(i).list_topics(timeout=10)
        return set(md.brokers)

    def leaders(self, topic: str, via: int) -> dict[int, int]:
        """Partition -> leader id, as broker `via` reports it (-1: none)."""
        md = self.admin(via).list_topics(topic, timeout=10)
        t = md.topics[topic]
        if t.error is not None:
            raise AssertionError(f"{topic}: {t.error}")
        return {p: pm.leader for p, pm in t.partitions.items()}

    def wait_topic(self, topic: str, partitions: int, timeout: float = WAIT_TIMEOUT) -> None:
        """Every running broker reports `partitions` partitions, each with a live leader."""
        up = set(self.running())

        def ready(i: int) -> bool:
            leaders = self.leaders(topic, i)
            return len(leaders) == partitions and set(leaders.values()) <= up

        for i in sorted(up):
            wait_until(lambda i=i: ready(i), f"{topic} on broker {i}", timeout)

    def partition_dir(self, i: int, topic: str, partition: int) -> Path:
        return self.brokers[i].data_dir / f"{topic}-{partition}"

    def wait_until(
        self, predicate: Callable[[], T], what: str = "the cluster", timeout: float = WAIT_TIMEOUT
    ) -> T:
        return wait_until(predicate, what, timeout)
