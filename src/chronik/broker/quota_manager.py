"""Client byte-rate quotas, as Kafka's ClientQuotaManager enforces them (KIP-13, KIP-55,
KIP-219).

Each Produce request's size counts against the producer_byte_rate, each consumer Fetch
response's size against the consumer_byte_rate (a follower's fetches are exempt), of
the quota entity that matches the request's user (its principal's name, sanitized) and
client id, in Kafka's order of precedence:

    users/<user>/clients/<client-id>      users/<default>/clients/<client-id>
    users/<user>/clients/<default>        users/<default>/clients/<default>
    users/<user>                          users/<default>
                                          clients/<client-id>, then clients/<default>

Requests matched by a default share a rate per user (or client id, or pair) as Kafka's
metric tags do; the clients of one user share the user's rate. The rate is Kafka's Rate
over a WindowedSum: quota.window.num samples (11) of quota.window.size.seconds (1), the
window never shorter than num - 1 samples, so a client new to the broker may send up to
(num - 1) x window x quota at once. When a request takes the rate over the quota the
throttle time is Kafka's (O - T) / T x W, the time that brings the observed rate O back
to the quota T over the window W (not capped, as Kafka's byte-rate quotas are not). The
response carries it as throttle_time_ms and the connection reads no further request
until it has passed (KIP-219), nor starts one read before; for request versions older
than KIP-219 (Produce < 6, Fetch < 8) the response itself waits that long, as Kafka
delays it. A Produce is counted as it is taken up, a Fetch once its response is built
(a throttled one answered empty and not counted).

A request with no quota costs one dictionary lookup; one with a quota a few float
operations. request_percentage and controller_mutation_rate are stored, not enforced.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from chronik.broker.config import ConfigError
from chronik.security.quota_configs import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    Entity,
    parse_path,
    quota_configs,
    sanitize,
)

# Kafka's settings and defaults.
WINDOW_NUM_KEY = "quota.window.num"
WINDOW_SIZE_KEY = "quota.window.size.seconds"
WINDOW_NUM_DEFAULT = 11
WINDOW_SIZE_SECONDS_DEFAULT = 1
# Kafka drops a client's sensors after an hour without requests.
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
# Kafka's KIP-219 versions: from these on the client throttles itself.
CLIENT_THROTTLES = {PRODUCER_BYTE_RATE: 6, CONSUMER_BYTE_RATE: 8}
# Metric names, Kafka's quota types.
QUOTA_TYPES = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch"}

# (user tag, client-id tag), as Kafka's metric tags: "" where the entity has no such part.
Tags = tuple[str, str]


def java_round(value: float) -> int:
    """Java's Math.round."""
    return int(math.floor(value + 0.5))


class Rate:
    """Kafka's Rate (SECONDS) over a WindowedSum: a ring of samples, each [start ms,
    last event ms, sum], one more than the configured number kept."""

    __slots__ = ("samples", "current", "num", "window_ms", "last_ms")

    def __init__(self, num: int, window_ms: int) -> None:
        self.samples: list[list[float]] = []
        self.current = 0
        self.num = num
        self.window_ms = window_ms
        self.last_ms = 0

    def record(self, value: float, now: int) -> None:
        samples = self.samples
        if not samples:
            samples.append([now, now, 0.0])
        sample = samples[self.current]
        if now - sample[0] >= self.window_ms:
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(samples):
                sample = [now, now, 0.0]
                samples.append(sample)
            else:
                sample = samples[self.current]
                sample[0] = sample[1] = now
                sample[2] = 0.0
        sample[2] += value
        sample[1] = now
        self.last_ms = now

    def _purge(self, now: int) -> None:
        expire = self.num * self.window_ms
        for sample in self.samples:
            if now - sample[1] >= expire:
                sample[0] = sample[1] = now
                sample[2] = 0.0

    def window_size(self, now: int) -> int:
        """The span the rate is taken over, in ms: since the oldest sample's start, and no
        less than num - 1 whole windows."""
        self._purge(now)
        if not self.samples:
            self.samples.append([now, now, 0.0])
        oldest = min(sample[0] for sample in self.samples)
        elapsed = now - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(int(elapsed), 1)

    def measure(self, now: int) -> float:
        """Per second."""
        self._purge(now)
        total = sum(sample[2] for sample in self.samples)
        return total / (self.window_size(now) / 1000.0)

    def record_and_throttle(self, value: float, now: int, bound: float) -> int:
        """Record, then Kafka's throttle time in ms (0 while the rate is within the bound)."""
        self.record(value, now)
        rate = self.measure(now)
        if rate <= bound:
            return 0
        return java_round((rate - bound) / bound * self.window_size(now))


def match(limits: Mapping[Entity, float], user: str, client: str) -> tuple[Tags, float] | None:
    """Kafka's DefaultQuotaCallback: the first entity with a quota in precedence order, as
    (metric tags, quota). ``user`` and ``client`` are sanitized names."""
    d = DEFAULT
    order: tuple[tuple[Entity, Tags], ...] = (
        ((user, client), (user, client)),
        ((user, d), (user, client)),
        ((user, None), (user, "")),
        ((d, client), (user, client)),
        ((d, d), (user, client)),
        ((d, None), (user, "")),
        ((None, client), ("", client)),
        ((None, d), ("", client)),
    )
    for entity, tags in order:
        bound = limits.get(entity)
        if bound is not None:
            return tags, bound
    return None


class ClientQuotas:
    """The broker's quota manager for producer_byte_rate and consumer_byte_rate. Its
    ``source`` (QuotaFile, or ZkQuotas in a cluster) has ``quotas`` (entity path -> config)
    and ``generation``; the limits are read again when the generation moves."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.num = _positive(values, WINDOW_NUM_KEY, WINDOW_NUM_DEFAULT)
        self.window_ms = _positive(values, WINDOW_SIZE_KEY, WINDOW_SIZE_SECONDS_DEFAULT) * 1000
        self.source: Any = None
        self._generation: int | None = None
        self._limits: dict[str, dict[Entity, float]] = {}
        # (key, principal, client id) -> (sensor key, quota), or None: no quota applies.
        self._matches: dict[tuple[str, str, str], tuple[tuple[str, str, str], float] | None] = {}
        self._sensors: dict[tuple[str, str, str], Rate] = {}
        self._swept_ms = 0
        # Quota type -> throttle time given (ms), and how many responses were throttled.
        self.throttle_ms_total: dict[str, int] = dict.fromkeys(QUOTA_TYPES.values(), 0)
        self.throttled_total: dict[str, int] = dict.fromkeys(QUOTA_TYPES.values(), 0)

    def use(self, source: Any) -> None:
        self.source = source
        self._generation = None

    # -- limits --------------------------------------------------------------------------

    def _refresh(self) -> None:
        source = self.source
        limits: dict[str, dict[Entity, float]] = {PRODUCER_BYTE_RATE: {}, CONSUMER_BYTE_RATE: {}}
        for path, config in source.quotas.items():
            entity = parse_path(path)
            if entity is None:
                continue
            values = quota_configs(config)
            for key, per_entity in limits.items():
                if key in values and values[key] > 0:
                    per_entity[entity] = values[key]
        self._limits = {key: found for key, found in limits.items() if found}
        self._matches.clear()
        self._generation = source.generation

    def _lookup(
        self, key: str, principal: str, client_id: str | None
    ) -> tuple[tuple[str, str, str], float] | None:
        source = self.source
        if source is None:
            return None
        if source.generation != self._generation:
            self._refresh()
        limits = self._limits.get(key)
        if limits is None:
            return None
        cache_key = (key, principal, client_id or "")
        try:
            return self._matches[cache_key]
        except KeyError:
            pass
        user = sanitize(principal.partition(":")[2])
        found = match(limits, user, sanitize(client_id or ""))
        result = None if found is None else ((key, *found[0]), found[1])
        if len(self._matches) > 100_000:
            self._matches.clear()
        self._matches[cache_key] = result
        return result

    # -- the request path ------------------------------------------------------------------

    def record(
        self, key: str, principal: str, client_id: str | None, value: float, now: int = 0
    ) -> int:
        """Count ``value`` bytes against the quota the client falls under (at ``now`` ms,
        default the clock's); the throttle time in ms (0: none, or no quota applies)."""
        found = self._lookup(key, principal, client_id)
        if found is None:
            return 0
        sensor_key, bound = found
        now = now or time.time_ns() // 1_000_000
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            self._sweep(now)
            sensor = self._sensors[sensor_key] = Rate(self.num, self.window_ms)
        throttle = sensor.record_and_throttle(value, now, bound)
        if throttle > 0:
            kind = QUOTA_TYPES[key]
            self.throttle_ms_total[kind] += throttle
            self.throttled_total[kind] += 1
        return throttle

    def unrecord(
        self, key: str, principal: str, client_id: str | None, value: float, now: int = 0
    ) -> None:
        """Take back what ``record`` counted (a throttled fetch answers no records)."""
        found = self._lookup(key, principal, client_id)
        if found is not None:
            sensor = self._sensors.get(found[0])
            if sensor is not None:
                sensor.record(-value, now or time.time_ns() // 1_000_000)

    def limited(self, key: str, principal: str, client_id: str | None) -> bool:
        return self._lookup(key, principal, client_id) is not None

    def max_value_in_window(self, key: str, principal: str, client_id: str | None) -> int | None:
        """Kafka's cap on a consumer's fetch size: what one window span may carry."""
        found = self._lookup(key, principal, client_id)
        if found is None:
            return None
        return max(int(found[1] * (self.num - 1) * self.window_ms / 1000), 1)

    def _sweep(self, now: int) -> None:
        """Drop sensors idle for an hour (checked at most once a minute, on a new one)."""
        if now - self._swept_ms < 60_000:
            return
        self._swept_ms = now
        expired = now - INACTIVE_SENSOR_EXPIRATION_MS
        idle = [k for k, sensor in self._sensors.items() if sensor.last_ms < expired]
        for sensor_key in idle:
            del self._sensors[sensor_key]


def _positive(values: Mapping[str, str], key: str, default: int) -> int:
    text = values.get(key)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(f"{key} must be at least 1, got {value}")
    return value
