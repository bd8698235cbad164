"""Samples consumer groups' committed offsets while a chaos run goes on, from the
harness's own namespace, into its own history (chaos.history; worker ``poller``):

- ``ok committed {group, coordinator, offsets: {"<topic>/<p>": offset}, started}``:
  ``started`` when the request went out, ``time`` when it was answered;
- ``fail committed {group, coordinator, error, started}``.

Each sample is an OffsetFetch sent straight to the group's coordinator as the cluster
names it: the leader, in ZooKeeper, of the group's ``__consumer_offsets`` partition.
Not through a client's FindCoordinator: the harness reaches every broker, an isolated
one too, and a broker cut off from ZooKeeper can go on answering for a group whose
coordinator has moved, with the offsets it had when it was cut off; that stale answer
is what no member can see (its links are cut too), and would read as a lost commit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from chronik.coordinator.offsets_codec import partition_for
from chronik.protocol.compat import build

from .cluster import BROKER_CONFIG
from .final_read import pkey
from .history import History

OFFSETS_TOPIC = "__consumer_offsets"


def offset_fetch(address: str, group: str, timeout: float = 3.0) -> dict[str, int]:
    """``"<topic>/<p>" -> offset`` of every partition ``group`` committed, as the broker
    at ``address`` answers OffsetFetch v5; raises on an error code or a broken link."""
    from kio.index import load_request_schema

    from integration.rawclient import RawClient

    request = build(load_request_schema(9, 5), group_id=group, topics=None)
    with RawClient(address, timeout=timeout) as raw:
        answer = raw.request(request)
    code = int(getattr(answer.error_code, "value", answer.error_code))
    if code:
        raise RuntimeError(f"OffsetFetch error code {code}")
    out: dict[str, int] = {}
    for topic in answer.topics:
        for p in topic.partitions:
            code = int(getattr(p.error_code, "value", p.error_code))
            if code == 0 and p.committed_offset >= 0:
                out[pkey(topic.name, int(p.partition_index))] = int(p.committed_offset)
    return out


class CommittedPoller:
    """A thread sampling ``groups`` every ``interval`` seconds (module docstring)."""

    def __init__(self, cluster: Any, groups: list[str], path: Path,
                 interval: float = 0.5) -> None:
        self.cluster = cluster
        self.groups = groups
        self.interval = interval
        config = next(iter(cluster.brokers.values())).config
        self.partitions = int(config.get("offsets.topic.num.partitions",
                                         BROKER_CONFIG["offsets.topic.num.partitions"]))
        self.history = History(path, "poller", "poller")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-poller", daemon=True)

    def start(self) -> CommittedPoller:
        self._thread.start()
        return self

    def sample(self, group: str) -> None:
        started = time.time()
        coordinator = None
        try:
            coordinator = self.cluster.leader(OFFSETS_TOPIC, partition_for(group, self.partitions))
            if coordinator < 0:
                raise RuntimeError("the group's offsets partition has no leader")
            offsets = offset_fetch(self.cluster.broker(coordinator).bootstrap, group)
        except Exception as exc:  # noqa: BLE001 - a coordinator moving or loading answers errors
            self.history.fail("committed", group=group, coordinator=coordinator,
                              error=repr(exc), started=started)
        else:
            self.history.ok("committed", group=group, coordinator=coordinator, offsets=offsets,
                            started=started)

    def _run(self) -> None:
        while not self._stop.is_set():
            for group in self.groups:
                self.sample(group)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self.history.close()
