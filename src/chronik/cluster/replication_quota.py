"""Replication throttles, as Kafka's ReplicationQuotaManager applies them (KIP-73): moving
a partition's data to a new or returning replica does not take all of the brokers' disks
and network from producers and consumers.

The settings, Kafka's names and formats:

- ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``: dynamic
  broker configs, bytes per second, as Kafka's BrokerConfigHandler resolves them: this
  broker's own (``/config/brokers/<id>``), else the cluster default
  (``/config/brokers/<default>``), else unlimited (Long.MAX_VALUE).
- ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``:
  topic configs, ``*`` (every partition, on every broker) or a comma-separated list of
  ``partition:broker`` pairs, e.g. ``0:1,0:2,1:3``. A broker throttles, as leader (resp.
  follower), the partitions whose pairs name its own broker id; an empty value throttles
  nothing. Malformed pairs (only a hand-written znode can hold them: the configs are
  validated when set) are skipped.

What is throttled, as Kafka's ReplicaManager.shouldLeaderThrottle and
ReplicaFetcherThread.shouldFollowerThrottle decide it: a throttled partition, while the
quota is exceeded, for a replica that is not in sync. An in-sync follower is never held
back (throttling it would take it out of the ISR). Leader side: a follower's fetch gets
no records for such a partition. Follower side: the replica fetcher leaves it out of its
fetch. Every byte of a throttled partition counts against the quota, whether the replica
it went to is in sync or not (Kafka's "traffic from both in-sync and out of sync replicas
is accounted for"), so the throttle bounds the whole replication traffic of the listed
partitions, and out-of-sync replicas get what in-sync ones leave.

The rate is Kafka's SimpleRate over replication.quota.window.num (11) samples of
replication.quota.window.size.seconds (1): the bytes of the samples kept, over the time
since the oldest sample began, and no less than one sample's length. The quota is
exceeded while that rate is above the bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chronik.cluster.replica_manager import Replica
    from chronik.cluster.view import ClusterView

log = logging.getLogger("chronik.replication")

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
DEFAULT_ENTITY = "<default>"
# Kafka's QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT: no throttle.
UNLIMITED = 2**63 - 1
# Kafka's replication.quota.window.num and replication.quota.window.size.seconds.
WINDOW_NUM = 11
WINDOW_MS = 1000
# Kafka's ReplicationQuotaManager.ALL_REPLICAS: "*", every partition of the topic.
ALL: frozenset[int] = frozenset({-1})


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class SimpleRate:
    """Kafka's SimpleRate over a SampledStat: a ring of up to num + 1 samples, each
    [start ms, last event ms, bytes]; a sample with no event for num windows is reset."""

    __slots__ = ("samples", "current", "num", "window_ms")

    def __init__(self, num: int = WINDOW_NUM, window_ms: int = WINDOW_MS) -> None:
        self.samples: list[list[int]] = []
        self.current = 0
        self.num = num
        self.window_ms = window_ms

    def record(self, value: int, now: int) -> None:
        samples = self.samples
        if not samples:
            samples.append([now, now, 0])
        sample = samples[self.current]
        if now - sample[0] >= self.window_ms:
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(samples):
                sample = [now, now, 0]
                samples.append(sample)
            else:
                sample = samples[self.current]
                sample[0] = sample[1] = now
                sample[2] = 0
        sample[2] += value
        sample[1] = now

    def _purge(self, now: int) -> None:
        expire = self.num * self.window_ms
        for sample in self.samples:
            if now - sample[1] >= expire:
                sample[0] = sample[1] = now
                sample[2] = 0

    def total(self, now: int) -> int:
        """The bytes the rate is taken over."""
        self._purge(now)
        return sum(sample[2] for sample in self.samples)

    def oldest(self, now: int) -> int:
        """When the oldest sample began. As Kafka's, the first look starts one: the
        window of a quota opens when it is first checked."""
        if not self.samples:
            self.samples.append([now, now, 0])
        return min(sample[0] for sample in self.samples)

    def window_size(self, now: int) -> int:
        """Since the oldest sample began, and no less than one sample (ms)."""
        self._purge(now)
        return max(now - self.oldest(now), self.window_ms)

    def measure(self, now: int) -> float:
        """Bytes per second."""
        return self.total(now) / (self.window_size(now) / 1000.0)


class ReplicationQuota:
    """One side's quota (Kafka's QuotaType LeaderReplication or FollowerReplication): its
    bound, the partitions it throttles, and the rate of their bytes."""

    def __init__(self, kind: str, num: int = WINDOW_NUM, window_ms: int = WINDOW_MS) -> None:
        self.kind = kind
        self.bound = UNLIMITED
        self.throttled: dict[str, frozenset[int]] = {}
        self.rate = SimpleRate(num, window_ms)
        self.bytes_total = 0  # every byte recorded, for the metrics
        self.held_total = 0  # partitions held back from a fetch, for the metrics

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts is ALL or partition in parts)

    def exceeded(self, now: int | None = None) -> bool:
        if self.bound >= UNLIMITED:
            return False
        return self.rate.measure(_now_ms() if now is None else now) > self.bound

    def record(self, value: int, now: int | None = None) -> None:
        if value > 0:
            self.rate.record(value, _now_ms() if now is None else now)
            self.bytes_total += value

    def byte_rate(self, now: int | None = None) -> float:
        return self.rate.measure(_now_ms() if now is None else now)

    def delay(self, now: int | None = None) -> float:
        """Seconds until the rate is back within the bound if nothing more is recorded
        (samples leaving the window may bring it back sooner), at least 10 ms: 0 when it
        is within already."""
        now = _now_ms() if now is None else now
        if not self.exceeded(now):
            return 0.0
        total = self.rate.total(now)
        if self.bound <= 0:
            return self.rate.num * self.rate.window_ms / 1000.0
        return max(self.rate.oldest(now) + total * 1000.0 / self.bound - now, 10.0) / 1000.0


def parse_throttled(value: str, broker_id: int) -> frozenset[int]:
    """The partitions a throttled-replicas value throttles on ``broker_id`` (Kafka's
    TopicConfigHandler.parseThrottledPartitions): ALL for ``*``."""
    text = value.strip()
    if text == "*":
        return ALL
    parts = set()
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        try:
            if sep and int(broker) == broker_id:
                parts.add(int(partition))
        except ValueError:
            continue
    return frozenset(parts)


def parse_rate(configs: Mapping[str, str], default: Mapping[str, str], name: str) -> int:
    """A throttled rate as Kafka's BrokerConfigHandler reads it: the broker's own config,
    else the cluster default's, else unlimited. A value that is no number (only a
    hand-written znode holds one) throttles nothing."""
    raw = configs.get(name, default.get(name))
    if raw is None:
        return UNLIMITED
    try:
        return max(int(str(raw).strip()), 0)
    except ValueError:
        log.warning("ignoring %s=%r: not a number of bytes per second", name, raw)
        return UNLIMITED


class ReplicationQuotas:
    """This broker's two replication quotas, kept current from the cluster view."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.leader = ReplicationQuota("LeaderReplication")
        self.follower = ReplicationQuota("FollowerReplication")
        self._seen: dict[str, tuple[str, str]] = {}

    # -- settings follow the view ------------------------------------------------------

    def follow(self, view: ClusterView) -> None:
        """The view changed: take the rates of /config/brokers and the throttled replicas
        of every topic's configs (cheap when nothing of them changed)."""
        mine = view.broker_configs.get(str(self.node_id), {})
        default = view.broker_configs.get(DEFAULT_ENTITY, {})
        for quota, name in ((self.leader, LEADER_RATE), (self.follower, FOLLOWER_RATE)):
            bound = parse_rate(mine, default, name)
            if bound != quota.bound:
                quota.bound = bound
                shown = "unlimited" if bound >= UNLIMITED else f"{bound} bytes/s"
                log.info("%s throttle now %s", quota.kind, shown)
        seen: dict[str, tuple[str, str]] = {}
        for name, topic in view.topics.items():
            configs = topic.configs
            values = (configs.get(LEADER_REPLICAS, ""), configs.get(FOLLOWER_REPLICAS, ""))
            if values != ("", ""):
                seen[name] = values
        if seen == self._seen:
            return
        for quota, index in ((self.leader, 0), (self.follower, 1)):
            throttled = {}
            for name, values in seen.items():
                parts = parse_throttled(values[index], self.node_id)
                if parts:
                    throttled[name] = parts
            if throttled != quota.throttled:
                quota.throttled = throttled
                log.info("%s throttles %s", quota.kind, _describe(throttled))
        self._seen = seen

    # -- the leader: followers' fetches --------------------------------------------------

    def leader_holds_back(self, replica: Replica | None, topic: str, partition: int,
                          follower_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower's fetch gets no records of this
        partition now."""
        quota = self.leader
        if not quota.is_throttled(topic, partition) or not quota.exceeded():
            return False
        if replica is not None and (
            follower_id in replica.isr or follower_id in (replica.pending_isr or ())
        ):
            return False
        quota.held_total += 1
        return True

    def leader_sent(self, topics: Iterable[Any]) -> None:
        """A follower's fetch response (TopicResults) is out: its bytes of throttled
        partitions count, as Kafka's KafkaApis records sizeOfThrottledPartitions."""
        quota = self.leader
        if not quota.throttled:
            return
        sent = 0
        for topic in topics:
            if topic.name not in quota.throttled:
                continue
            for part in topic.partitions:
                if part.records and quota.is_throttled(topic.name, part.partition):
                    sent += len(part.records)
        quota.record(sent)

    # -- the follower: its own fetches ------------------------------------------------------

    def follower_held(self, replicas: Sequence[Replica]) -> set[tuple[str, int]]:
        """Kafka's shouldFollowerThrottle over the partitions of a fetch about to be sent:
        those to leave out of it."""
        quota = self.follower
        if not quota.throttled or not quota.exceeded():
            return set()
        held = {
            r.key for r in replicas
            if quota.is_throttled(r.topic, r.partition) and not self._in_sync(r)
        }
        quota.held_total += len(held)
        return held

    def _in_sync(self, replica: Replica) -> bool:
        """In the ISR, or (Kafka's PartitionFetchState.isReplicaInSync) at the leader's
        high watermark as of the last fetch."""
        if self.node_id in replica.isr:
            return True
        return 0 <= replica.leader_hw <= replica.log.end_offset

    def follower_received(
        self, topic: str, partition: int, records: bytes | memoryview | None
    ) -> None:
        if records and self.follower.is_throttled(topic, partition):
            self.follower.record(len(records))


def _describe(throttled: Mapping[str, frozenset[int]]) -> str:
    if not throttled:
        return "nothing"
    shown = [
        f"{name}: {'*' if parts is ALL else ','.join(map(str, sorted(parts)))}"
        for name, parts in sorted(throttled.items())
    ]
    more = f" and {len(shown) - 5} more topics" if len(shown) > 5 else ""
    return "; ".join(shown[:5]) + more
