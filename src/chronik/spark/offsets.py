"""Driver-side offset planning: which partitions a query reads and where each range starts and ends.

Offsets travel as Spark's Kafka source writes them in its checkpoint: ``{"topic": {"0": 42}}``,
the offset being the next one to read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from confluent_kafka import IsolationLevel
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from chronik.spark.options import EARLIEST, LATEST, OptionError, StartSpec, Subscription, quiet

TP = tuple[str, int]
PartitionOffsets = dict[TP, int]

_ADMIN_KEYS = ("bootstrap.servers", "security.protocol", "client.id", "log_level", "debug")


def admin_client(kafka: dict[str, str]) -> AdminClient:
    conf = {k: v for k, v in kafka.items() if k.startswith(("sasl.", "ssl.")) or k in _ADMIN_KEYS}
    return AdminClient(quiet(conf))


def to_json_offsets(offsets: PartitionOffsets) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = off
    return out


def from_json_offsets(obj: dict | str) -> PartitionOffsets:
    if isinstance(obj, str):
        obj = json.loads(obj)
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


class OffsetPlanner:
    def __init__(self, kafka: dict[str, str], subscription: Subscription, timeout_s: float = 30):
        self.kafka = kafka
        self.subscription = subscription
        self.timeout_s = timeout_s
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = admin_client(self.kafka)
        return self._admin

    def partitions(self) -> list[TP]:
        meta = self.admin.list_topics(timeout=self.timeout_s)
        sub = self.subscription
        if sub.assign is not None:
            return sorted((t, p) for t, parts in sub.assign.items() for p in parts)
        found = []
        for name, topic in meta.topics.items():
            if topic.error is None and sub.matches(name):
                found.extend((name, p) for p in topic.partitions)
        if sub.topics:
            missing = set(sub.topics) - {t for t, _ in found}
            if missing:
                raise OptionError(f"topics not found: {', '.join(sorted(missing))}")
        return sorted(found)

    def list_offsets(self, specs: dict[TP, OffsetSpec]) -> dict[TP, int]:
        if not specs:
            return {}
        # read_committed reads end at the last stable offset, as ListOffsets answers it.
        committed = self.kafka.get("isolation.level") == "read_committed"
        futures = self.admin.list_offsets(
            {KafkaTopicPartition(t, p): s for (t, p), s in specs.items()},
            isolation_level=IsolationLevel.READ_COMMITTED
            if committed
            else IsolationLevel.READ_UNCOMMITTED,
            request_timeout=self.timeout_s,
        )
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self.list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self.list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def resolve(
        self, spec: StartSpec, tps: list[TP], is_start: bool, ts_strategy: str = "error"
    ) -> PartitionOffsets:
        """Concrete offsets for `spec`; partitions the spec does not name take its default."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("timestamp", "timestamps"):
            return self._by_timestamp(spec, tps, is_start, ts_strategy)
        wanted: dict[TP, int] = {}
        for tp in tps:
            wanted[tp] = spec.offsets.get(tp[0], {}).get(tp[1], EARLIEST if is_start else LATEST)
        for topic, parts in spec.offsets.items():
            for part in parts:
                if (topic, part) not in wanted:
                    raise OptionError(f"offsets given for {topic}-{part}, not in the subscription")
        lookups = {tp: o for tp, o in wanted.items() if o in (EARLIEST, LATEST)}
        looked = self.list_offsets(
            {tp: OffsetSpec.earliest() if o == EARLIEST else OffsetSpec.latest()
             for tp, o in lookups.items()}
        )
        return {tp: looked.get(tp, o) for tp, o in wanted.items()}

    def _by_timestamp(
        self, spec: StartSpec, tps: list[TP], is_start: bool, ts_strategy: str
    ) -> PartitionOffsets:
        stamps: dict[TP, int] = {}
        for tp in tps:
            if spec.kind == "timestamp":
                stamps[tp] = spec.timestamp  # type: ignore[assignment]
            elif tp[1] in spec.by_partition_ts.get(tp[0], {}):
                stamps[tp] = spec.by_partition_ts[tp[0]][tp[1]]
        found = self.list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})
        unmatched = [tp for tp in tps if found.get(tp, -1) < 0]
        if unmatched and is_start and ts_strategy == "error":
            raise OptionError(
                "no offset matches the starting timestamp for "
                + ", ".join(f"{t}-{p}" for t, p in unmatched)
                + " (set startingOffsetsByTimestampStrategy=latest to start at the end)"
            )
        # Spark's rule: an unmatched timestamp means "latest", for a start and an end alike.
        latest = self.latest(unmatched)
        return {tp: found[tp] if found.get(tp, -1) >= 0 else latest[tp] for tp in tps}
