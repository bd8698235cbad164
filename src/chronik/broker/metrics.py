# Prometheus metrics, served as text exposition format 0.0.4 on GET /metrics:
#
#   # HELP name text
#   # TYPE name counter|gauge|histogram
#   name{label="value",...} number
#
# Counters and histograms are updated on the request path with a few integer
# additions; gauges (partition sizes, end offsets, group lag) are read from the
# catalog and the coordinator only when scraped.
from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map

if TYPE_CHECKING:
    from chronik.broker.server import Broker

log = logging.getLogger("chronik.metrics")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        sep = "," if labels else ""
        for bound, n in zip(LATENCY_BUCKETS, self.counts, strict=False):
            running += n
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braced = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{braced} {self.total:.6f}")
        out.append(f"{name}_count{braced} {self.count}")
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _tp(topic: str, partition: int) -> str:
    return f'{{topic="{_label(topic)}",partition="{partition}"}}'


class Metrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.requests: dict[int, Histogram] = defaultdict(Histogram)
        self.errors: dict[int, int] = defaultdict(int)
        self.topic_bytes_in: dict[str, int] = defaultdict(int)
        self.total_bytes_out = 0
        self.fsync = Histogram()
        self.connections_total = 0
        self._server: asyncio.Server | None = None

    # -- hot path -----------------------------------------------------------------

    def observe_request(self, api_key: int, seconds: float) -> None:
        self.requests[api_key].observe(seconds)

    def request_failed(self, api_key: int) -> None:
        self.errors[api_key] += 1

    def bytes_in(self, topic: str, n: int) -> None:
        self.topic_bytes_in[topic] += n

    def bytes_out(self, n: int) -> None:
        self.total_bytes_out += n

    def observe_fsync(self, seconds: float) -> None:
        self.fsync.observe(seconds)

    # -- exposition -----------------------------------------------------------------

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family("chronik_requests_total", "counter", "Requests served, by Kafka API.")
        for key, hist in sorted(self.requests.items()):
            lines.append(
                f'chronik_requests_total{{api="{api_key_map.get(key, key)}"}} {hist.count}'
            )
        family(
            "chronik_request_errors_total",
            "counter",
            "Requests that failed and closed the connection.",
        )
        for key, n in sorted(self.errors.items()):
            lines.append(f'chronik_request_errors_total{{api="{api_key_map.get(key, key)}"}} {n}')
        family(
            "chronik_request_duration_seconds", "histogram", "Time from decode to response, by API."
        )
        for key, hist in sorted(self.requests.items()):
            lines.extend(
                hist.lines("chronik_request_duration_seconds", f'api="{api_key_map.get(key, key)}"')
            )
        family("chronik_bytes_in_total", "counter", "Record batch bytes appended, by topic.")
        for topic, n in sorted(self.topic_bytes_in.items()):
            lines.append(f'chronik_bytes_in_total{{topic="{_label(topic)}"}} {n}')
        family("chronik_bytes_out_total", "counter", "Record bytes served by Fetch.")
        lines.append(f"chronik_bytes_out_total {self.total_bytes_out}")
        family(
            "chronik_fsync_duration_seconds", "histogram", "Duration of each group-commit fsync."
        )
        lines.extend(self.fsync.lines("chronik_fsync_duration_seconds", ""))
        family("chronik_connections", "gauge", "Open client connections.")
        lines.append(f"chronik_connections {len(self.broker._connections)}")
        family(
            "chronik_sasl_authentications_total",
            "counter",
            "SASL authentications by mechanism and result (success, failure).",
        )
        for (mechanism, result), n in sorted(self.broker.security.outcomes.items()):
            lines.append(
                f'chronik_sasl_authentications_total{{mechanism="{_label(mechanism)}",'
                f'result="{result}"}} {n}'
            )
        family(
            "chronik_sasl_reauthentications_total",
            "counter",
            "SASL re-authentications (connections.max.reauth.ms) by mechanism and result.",
        )
        for (mechanism, result), n in sorted(self.broker.security.reauth_outcomes.items()):
            lines.append(
                f'chronik_sasl_reauthentications_total{{mechanism="{_label(mechanism)}",'
                f'result="{result}"}} {n}'
            )
        family(
            "chronik_sasl_expired_connections_closed_total",
            "counter",
            "Connections closed for a request after their SASL session expired.",
        )
        lines.append(
            f"chronik_sasl_expired_connections_closed_total {self.broker.security.expired_closed}"
        )
        self._render_partitions(lines, family)
        self._render_groups(lines, family)
        self._render_transactions(lines, family)
        self._render_cluster(lines, family)
        self._render_replication(lines, family)
        self._render_fetch_sessions(lines, family)
        self._render_quotas(lines, family)
        self._render_registry(lines, family)
        return "\n".join(lines) + "\n"

    def _render_partitions(self, lines: list[str], family: object) -> None:
        topics = sorted(self.broker.catalog.topics.values(), key=lambda t: t.name)
        family("chronik_partition_size_bytes", "gauge", "Bytes on disk per partition.")  # type: ignore[operator]
        rows = [
            (t.name, i, p) for t in topics for i, p in enumerate(t.partitions) if p is not None
        ]
        for name, index, plog in rows:
            lines.append(f"chronik_partition_size_bytes{_tp(name, index)} {plog.size_bytes}")
        family("chronik_log_end_offset", "gauge", "Next offset to be written, per partition.")  # type: ignore[operator]
        for name, index, plog in rows:
            lines.append(f"chronik_log_end_offset{_tp(name, index)} {plog.end_offset}")
        family("chronik_log_start_offset", "gauge", "First offset kept, per partition.")  # type: ignore[operator]
        for name, index, plog in rows:
            lines.append(f"chronik_log_start_offset{_tp(name, index)} {plog.start_offset}")

    def _render_cluster(self, lines: list[str], family: object) -> None:
        """Kafka's controller and replica-manager gauges, in cluster mode."""
        cluster = self.broker.cluster
        if cluster is None:
            return
        view = cluster.view
        led = offline = 0
        for topic in view.topics.values():
            for index in range(topic.partition_count):
                leader = view.leader_of(topic.name, index)
                led += leader == cluster.node_id
                offline += leader < 0
        gauges = (
            ("chronik_cluster_brokers", "Live brokers in the cluster.", len(view.brokers)),
            ("chronik_cluster_active_controller", "1 on the controller (Kafka's "
             "ActiveControllerCount).", int(cluster.controller.active)),
            ("chronik_cluster_leader_partitions", "Partitions this broker leads (Kafka's "
             "LeaderCount).", led),
            ("chronik_cluster_offline_partitions", "Partitions without a leader (Kafka's "
             "OfflinePartitionsCount).", offline),
        )
        for name, text, value in gauges:
            family(name, "gauge", text)  # type: ignore[operator]
            lines.append(f"{name} {value}")

    def _render_replication(self, lines: list[str], family: object) -> None:
        """Kafka's ReplicaManager gauges. A single node has no followers: all zero."""
        cluster = self.broker.cluster
        replicas = None if cluster is None else getattr(cluster, "replicas", None)
        values = (0, 0, 0, 0)
        if replicas is not None:
            values = (
                replicas.under_replicated(),
                replicas.isr_shrinks,
                replicas.isr_expands,
                replicas.max_lag(),
            )
        metrics = (
            ("chronik_under_replicated_partitions", "gauge", "Partitions led here whose ISR "
             "is smaller than their replica count (Kafka's UnderReplicatedPartitions)."),
            ("chronik_isr_shrinks_total", "counter", "Times a follower left the ISR of a "
             "partition led here (Kafka's IsrShrinksPerSec)."),
            ("chronik_isr_expands_total", "counter", "Times a follower rejoined the ISR of a "
             "partition led here (Kafka's IsrExpandsPerSec)."),
            ("chronik_replica_max_lag", "gauge", "Largest lag in messages of a replica this "
             "broker follows behind its leader (Kafka's ReplicaFetcherManager MaxLag)."),
        )
        for (name, kind, text), value in zip(metrics, values, strict=True):
            family(name, kind, text)  # type: ignore[operator]
            lines.append(f"{name} {int(value)}")
        quotas = None if replicas is None else getattr(replicas, "quotas", None)
        if quotas is not None:
            self._render_replication_throttles(lines, family, (quotas.leader, quotas.follower))

    def _render_replication_throttles(self, lines: list[str], family: object,
                                      sides: tuple[Any, ...]) -> None:
        """Kafka's LeaderReplication and FollowerReplication byte-rate: the bytes of
        throttled partitions (chronik.cluster.replication_quota)."""
        rows = (
            ("chronik_replication_throttled_byte_rate", "gauge", "Bytes/s of partitions under "
             "a replication throttle, over the quota window (Kafka's byte-rate).",
             lambda q: f"{q.byte_rate():.1f}"),
            ("chronik_replication_throttled_bytes_total", "counter", "Bytes of partitions "
             "under a replication throttle sent (leader) or fetched (follower).",
             lambda q: str(q.bytes_total)),
            ("chronik_replication_throttled_held_total", "counter", "Times a partition was "
             "held back from a follower's fetch because its throttle's rate was over.",
             lambda q: str(q.held_total)),
        )
        for name, kind, text, value in rows:
            family(name, kind, text)  # type: ignore[operator]
            for quota in sides:
                lines.append(f'{name}{{type="{quota.kind}"}} {value(quota)}')

    def _render_fetch_sessions(self, lines: list[str], family: object) -> None:
        """Kafka's FetchSessionCache figures (KIP-227)."""
        cache = self.broker.fetch_sessions
        metrics = (
            ("chronik_fetch_sessions", "gauge", "Fetch sessions kept (Kafka's "
             "NumIncrementalFetchSessions).", len(cache)),
            ("chronik_fetch_session_partitions", "gauge", "Partitions held by all fetch "
             "sessions (Kafka's NumIncrementalFetchPartitionsCached).", cache.partitions),
            ("chronik_fetch_session_evictions_total", "counter", "Fetch sessions evicted or "
             "expired (Kafka's IncrementalFetchSessionEvictionsPerSec).", cache.evictions),
            ("chronik_incremental_fetches_total", "counter", "Fetch requests served "
             "incrementally, within a fetch session.", cache.incremental_fetches),
        )
        for name, kind, text, value in metrics:
            family(name, kind, text)  # type: ignore[operator]
            lines.append(f"{name} {value}")

    def _render_quotas(self, lines: list[str], family: object) -> None:
        """Client quota throttling, by Kafka's quota type (Produce, Fetch)."""
        quotas = self.broker.quotas
        family("chronik_quota_throttle_time_ms_total", "counter", "Throttle time given to "  # type: ignore[operator]
               "clients over their byte-rate quota, in ms (Kafka's throttle-time).")
        for kind, ms in sorted(quotas.throttle_ms_total.items()):
            lines.append(f'chronik_quota_throttle_time_ms_total{{type="{kind}"}} {ms}')
        family("chronik_quota_throttled_responses_total", "counter", "Responses that "  # type: ignore[operator]
               "carried a quota throttle time.")
        for kind, n in sorted(quotas.throttled_total.items()):
            lines.append(f'chronik_quota_throttled_responses_total{{type="{kind}"}} {n}')

    def _render_registry(self, lines: list[str], family: object) -> None:
        """The schema registry's state as this broker's copy of ``_schemas`` holds it;
        nothing when the broker serves no registry."""
        registry = self.broker.registry
        if registry is None:
            return
        state = registry.state
        live = deleted = 0
        live_subjects = 0
        for versions in state.subjects.values():
            alive = sum(not v.deleted for v in versions.values())
            live += alive
            deleted += len(versions) - alive
            live_subjects += alive > 0
        gauges = (
            (
                "chronik_schema_registry_subjects",
                "Subjects with a live (not soft-deleted) version.",
                live_subjects,
            ),
            (
                "chronik_schema_registry_schemas",
                "Distinct schemas (ids) registered.",
                state.schema_count(),
            ),
            (
                "chronik_schema_registry_primary",
                "1 on the registry's primary, the broker that writes _schemas.",
                int(registry.log.is_primary()),
            ),
        )
        for name, text, value in gauges:
            family(name, "gauge", text)  # type: ignore[operator]
            lines.append(f"{name} {value}")
        versions_text = "Subject versions, live and soft-deleted."
        family("chronik_schema_registry_versions", "gauge", versions_text)  # type: ignore[operator]
        lines.append(f'chronik_schema_registry_versions{{state="live"}} {live}')
        lines.append(f'chronik_schema_registry_versions{{state="deleted"}} {deleted}')
        counters = (
            (
                "chronik_schema_registry_forwarded_writes_total",
                "Registry requests forwarded to the primary (writes; reads too on a broker "
                "without a copy of _schemas).",
                registry.forwarded_writes,
            ),
            (
                "chronik_schema_registry_bad_records_total",
                "Records of _schemas skipped as not in the registry's format.",
                state.bad_records,
            ),
        )
        for name, text, value in counters:
            family(name, "counter", text)  # type: ignore[operator]
            lines.append(f"{name} {value}")

    def _render_groups(self, lines: list[str], family: object) -> None:
        family("chronik_consumer_group_lag", "gauge", "Log end offset minus the committed offset.")  # type: ignore[operator]
        coordinator = self.broker.coordinator
        groups = getattr(coordinator, "groups", None) or {}
        catalog = self.broker.catalog
        for group_id, group in sorted(groups.items()):
            for (topic_name, index), committed in sorted(getattr(group, "offsets", {}).items()):
                topic = catalog.get(topic_name)
                plog = None if topic is None else topic.log(index)
                if plog is None:  # in a cluster: a partition another broker stores
                    continue
                lag = max(plog.end_offset - committed.offset, 0)
                lines.append(
                    f'chronik_consumer_group_lag{{group="{_label(group_id)}",'
                    f'topic="{_label(topic_name)}",partition="{index}"}} {lag}'
                )

    def _render_transactions(self, lines: list[str], family: object) -> None:
        """Open transactions on the partitions led here, how far each holds read_committed
        consumers back (high watermark minus last stable offset), and the coordinator's
        transactional ids by state."""
        cluster = self.broker.cluster
        open_count = 0
        lags: list[str] = []
        for topic in sorted(self.broker.catalog.topics.values(), key=lambda t: t.name):
            for index, plog in enumerate(topic.partitions):
                if plog is None or not plog.producer_state.ongoing:
                    continue
                if cluster is not None and not cluster.is_local_leader(topic.name, index):
                    continue
                open_count += len(plog.producer_state.ongoing)
                lag = max(plog.high_watermark - plog.last_stable_offset, 0)
                lags.append(f"chronik_last_stable_offset_lag{_tp(topic.name, index)} {lag}")
        family("chronik_open_transactions", "gauge", "Transactions open on the partitions "  # type: ignore[operator]
               "led here, each counted once per partition.")
        lines.append(f"chronik_open_transactions {open_count}")
        family("chronik_last_stable_offset_lag", "gauge", "High watermark minus last stable "  # type: ignore[operator]
               "offset, per partition with an open transaction.")
        lines.extend(lags)
        family("chronik_transactional_ids", "gauge", "Transactional ids this broker "  # type: ignore[operator]
               "coordinates, by state.")
        coordinator = getattr(self.broker, "txn_coordinator", None)
        states: dict[str, int] = {}
        for txn in coordinator.transactions() if coordinator is not None else ():
            states[txn.state.kafka_name] = states.get(txn.state.kafka_name, 0) + 1
        for state, n in sorted(states.items()):
            lines.append(f'chronik_transactional_ids{{state="{state}"}} {n}')

    # -- HTTP ---------------------------------------------------------------------------

    async def serve(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle_http, host, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    async def _handle_http(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                body = self.render().encode()
                status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, ctype = b"not found: try /metrics\n", "404 Not Found", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
