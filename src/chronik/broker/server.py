"""The broker: one asyncio event loop serving the Kafka protocol over TCP.

Requests on a connection are answered in the order they arrived. A Produce may
start while earlier Produces on the same connection still wait for their fsync
(it is released once its batches are appended), so one pipelining client shares
group commits; every other request waits until the one before it is answered
(its response taken by the socket), as Kafka serves a connection one request at
a time. Accepting and the connection limits: chronik.broker.listener; the memory
budget: chronik.broker.memory_pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chronik.broker import apis
from chronik.broker.config import BrokerConfig
from chronik.broker.connection import Connection
from chronik.broker.descriptors import default_max_connections, raise_nofile_limit
from chronik.broker.dynamic_configs import DynamicBrokerConfigs
from chronik.broker.fetch_sessions import FetchSessionCache
from chronik.broker.listener import Bound, Listener, bind, listen
from chronik.broker.memory_pool import MemoryPool
from chronik.broker.metadata_cache import TopicEntryCache
from chronik.broker.metrics import Metrics
from chronik.broker.quota_manager import ClientQuotas
from chronik.broker.schema_validation import SchemaValidator
from chronik.broker.topics import data_partition, partition_count
from chronik.cluster.marker_channel import MarkerChannel
from chronik.cluster.node import ClusterNode
from chronik.coordinator.group_coordinator import GroupCoordinator
from chronik.coordinator.marker_writer import MarkerWriter
from chronik.coordinator.producer_ids import ProducerIdAllocator
from chronik.coordinator.transaction_coordinator import TransactionCoordinator
from chronik.coordinator.transaction_markers import MarkerSender
from chronik.http.eventstore import HttpApi
from chronik.http.schema_registry import SchemaRegistryApi
from chronik.registry.registry import SchemaRegistry
from chronik.registry.schemas_topic import SchemasTopic
from chronik.security.acl_model import AclError
from chronik.security.acl_store import AclFile
from chronik.security.authorizer import Authorizer
from chronik.security.broker_security import BrokerSecurity
from chronik.security.credentials import SharedCredentials
from chronik.security.listeners import ListenerSpec
from chronik.security.principal import PrincipalRuleError
from chronik.security.quota_configs import QuotaFile, QuotaFileError
from chronik.storage.catalog import Catalog
from chronik.storage.compaction import CompactionJob
from chronik.storage.file_cache import FILES
from chronik.storage.group_commit import GroupCommitter
from chronik.storage.partition_log import PartitionLog
from chronik.storage.partition_writer import PartitionWriter

log = logging.getLogger("chronik.broker")
FLUSH_CHECK_SECONDS = 1.0
# How long a graceful stop waits for a connection to take its last responses.
STOP_DRAIN_SECONDS = 10.0
# How often the TLS key and trust store files are checked for a change.
TLS_WATCH_SECONDS = 10.0


class BrokerStartError(RuntimeError):
    """The broker cannot start (its cluster cannot be reached, or does not match its data
    directory): one line for the user, no traceback."""


def _read_cluster_id(data_dir: Path) -> str | None:
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    return None


def _write_meta_properties(data_dir: Path, cluster_id: str, node_id: int | None) -> None:
    path = data_dir / "meta.properties"
    tmp = path.with_suffix(".tmp")
    broker = f"broker.id={node_id}\n" if node_id is not None else ""
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\n{broker}")
    os.replace(tmp, path)


def _load_cluster_id(data_dir: Path) -> str:
    """Kafka keeps the cluster id in meta.properties; so does chronik."""
    cluster_id = _read_cluster_id(data_dir)
    if cluster_id is None:
        cluster_id = uuid.uuid4().hex[:22]
        _write_meta_properties(data_dir, cluster_id, None)
    return cluster_id


class Broker:
    def __init__(
        self,
        data_dir: str | Path = "chronik-data",
        host: str = "127.0.0.1",
        port: int = 9092,
        config: Mapping[str, str] | None = None,
        advertised_host: str | None = None,
        metrics_listen: str | None = None,
        http_listen: str | None = None,
        schema_registry_listen: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig(config)
        self.security = BrokerSecurity(
            self.config.values,
            self.data_dir,
            host,
            port,
            advertised_host,
            clustered=self.config.clustered,
        )
        self.authorizer = Authorizer(self.config.values)
        # Client byte-rate quotas; their configs are read in start().
        self.quotas = ClientQuotas(self.config.values)
        # This broker as other brokers reach it: its inter-broker listener.
        self.host, self.port = self.security.inter_broker.advertised()
        self.node_id = self.config.node_id
        self.cluster_id = ""
        self.catalog: Catalog
        self.committer: GroupCommitter
        self.writer: PartitionWriter
        self.markers: MarkerWriter
        self.producer_ids: ProducerIdAllocator
        self.coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator
        # In cluster mode (zookeeper.connect), else None.
        self.cluster: ClusterNode | None = None
        self.metrics = Metrics(self)
        self.dynamic = DynamicBrokerConfigs(self)
        self.metrics_listen = metrics_listen
        self.metrics_port: int | None = None
        # The event store's HTTP API (chronik.http.eventstore): --http-listen or http.listen.
        self.http_listen = http_listen or self.config.values.get("http.listen") or None
        self.http_api: HttpApi | None = None
        self.http_port: int | None = None
        # The schema registry (chronik.registry, chronik.http.schema_registry):
        # --schema-registry-listen or schema.registry.listen.
        self.registry_listen = (
            schema_registry_listen or self.config.values.get("schema.registry.listen") or None
        )
        self.registry: SchemaRegistry | None = None
        self.registry_api: SchemaRegistryApi | None = None
        self.registry_port: int | None = None
        self.schema_validator = SchemaValidator()
        self.memory_pool = MemoryPool(self.config.queued_max_request_bytes)
        self.fetch_sessions = FetchSessionCache(
            self.config.fetch_session_cache_slots, self.config.max_broker_partitions
        )
        self.metadata_entries = TopicEntryCache()
        self._listener: Listener | None = None
        self._bound: list[Bound] = []
        self._connections: set[Connection] = set()
        # Fetches waiting on a log (by id), consumers' and followers' apart.
        self._waiters: dict[int, set[asyncio.Future[None]]] = {}
        self._replica_waiters: dict[int, set[asyncio.Future[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._compaction: CompactionJob | None = None  # the pass on a worker thread, if any
        self._stopping = False
        self.started = asyncio.Event()

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    async def _start_registry(self, listen: str) -> None:
        topic = SchemasTopic(
            self.catalog, self.writer, self.cluster, self.now_ms, self.config.values
        )
        self.registry = SchemaRegistry(topic, self.config.values)
        self.schema_validator.attach(self.registry)
        self.registry_api = SchemaRegistryApi(self, self.registry, topic)
        try:
            self.registry_port = await self.registry_api.serve(
                listen, self.security.inter_broker.advertised()[0]
            )
        except ValueError as exc:
            raise BrokerStartError(str(exc)) from None
        if self.cluster is not None:
            self.cluster.registry_url = lambda: self.registry_api.url if self.registry_api else None
        self.registry.start()

    async def _bind_http(self, listen: str) -> None:
        try:
            self.http_api = HttpApi(self)
            self.http_port = await self.http_api.bind(
                listen, self.security.inter_broker.advertised()[0]
            )
        except ValueError as exc:
            raise BrokerStartError(str(exc)) from None
        if self.cluster is not None:
            self.cluster.http_url = lambda: self.http_api.url if self.http_api else None

    def http_url_of(self, node_id: int) -> str | None:
        """The HTTP listener URL of a broker (event store, console): this one's, or as
        registered."""
        if node_id == self.node_id or self.cluster is None:
            return self.http_api.url if self.http_api is not None else None
        info = self.cluster.broker_info(node_id)
        return info.http_api if info is not None else None

    def registry_url_of(self, node_id: int) -> str | None:
        """The schema registry URL of a broker: this one's, or as registered."""
        if node_id == self.node_id or self.cluster is None:
            return self.registry_api.url if self.registry_api is not None else None
        info = self.cluster.broker_info(node_id)
        return info.schema_registry if info is not None else None

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.clustered:
            await self._connect_cluster()
        else:
            self.cluster_id = _load_cluster_id(self.data_dir)
            try:
                self.authorizer.use(AclFile(self.data_dir))
                self.quotas.use(QuotaFile(self.data_dir))
            except (AclError, QuotaFileError) as exc:
                raise BrokerStartError(str(exc)) from None
        if self.authorizer.enabled:
            log.info(
                "ACLs are checked: %d bindings, super users: %s, allow.everyone.if.no.acl.found=%s",
                len(self.authorizer.source.acls) if self.authorizer.source else 0,
                ", ".join(sorted(self.authorizer.super_users)) or "none",
                str(self.authorizer.allow_if_none).lower(),
            )
        for key in self.config.ignored_keys():
            log.warning("config %s is accepted but has no effect on chronik", key)
        # Raised first: the log file cache and max.connections are sized from it.
        nofile = raise_nofile_limit()
        open_files = FILES.configure(self.config.log_open_files_max)
        log.info("log files keep at most %d descriptors open (log.open.files.max)", open_files)
        self.dynamic.load()  # a single node's dynamic broker configs, before the logs
        self.catalog = Catalog(
            self.data_dir,
            self.dynamic.effective(),
            max_partitions=self.config.max_broker_partitions,
        )
        self.catalog.load()
        self.committer = GroupCommitter()
        self.committer.on_fsync = self.metrics.observe_fsync
        self.writer = PartitionWriter(self.committer, self.wake_fetches, self.metrics.bytes_in)
        if self.cluster is not None:
            self.writer.attach(self.cluster.replicas, self.cluster.lease_held)
        self.producer_ids = ProducerIdAllocator(self.data_dir / ".meta" / "producer-ids")
        self.coordinator = _make_coordinator(self)
        if self.coordinator is not None:
            await self.coordinator.start()
        self.markers = MarkerWriter(self.writer, self.locate, self.now_ms, self._offsets_marker)
        remote = None
        if self.cluster is not None:
            remote = MarkerChannel(self.cluster, self.security.client)
        self.txn_coordinator = TransactionCoordinator(
            self, MarkerSender(self.markers, self.node_id, remote)
        )
        await self.txn_coordinator.start()
        if self.cluster is not None:
            group = self.coordinator
            self.cluster.serve(
                self.catalog,
                self.wake_fetches,
                offsets=group if hasattr(group, "load_partition") else None,
                transactions=self.txn_coordinator,
                on_topic_deleted=getattr(group, "on_topic_deleted", None),
            )
        max_connections = self.config.max_connections
        if max_connections is None:
            max_connections = default_max_connections(nofile)
            self.config.values["max.connections"] = str(max_connections)
        bound: list[Bound] = []
        try:
            for spec in self.security.listeners:
                sockets = await bind(spec.host, spec.port)
                spec.port = sockets[0].getsockname()[1]
                tls = self.security.tls if spec.tls else None
                bound.extend(Bound(sock, spec, tls) for sock in sockets)
            listen([b.sock for b in bound])
        except OSError:
            for b in bound:
                b.sock.close()
            raise
        self.host, self.port = self.security.inter_broker.advertised()
        self._bound = bound
        self._listener = Listener(
            bound,
            self._on_connection,
            max_connections,
            self.config.max_connections_per_ip,
            self.config.max_connections_per_ip_overrides,
        )
        self.dynamic.started()
        if self.registry_listen:
            # Bound before the cluster is joined: its URL is part of the registration.
            await self._start_registry(self.registry_listen)
        if self.http_listen:
            # Bound before the cluster is joined too (its URL is registered, for requests
            # forwarded to the partitions led here); served once the broker is.
            await self._bind_http(self.http_listen)
        if self.cluster is not None:
            # The cluster's dynamic broker configs (/config/brokers) follow the view.
            view = self.cluster.view
            view.subscribe(lambda: self.dynamic.follow(view))
            # Joined once the port is known (it is registered) and before any request is
            # taken: the first requests already see the cluster.
            await self.cluster.start()
        self._listener.start()
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        if self.security.tls is not None:
            self._tasks.append(asyncio.create_task(self._tls_watch_loop()))
        self._tasks.append(asyncio.create_task(self._flush_loop()))
        if self.cluster is not None:
            self._tasks.append(asyncio.create_task(self._hw_checkpoint_loop()))
        if self.config.connections_max_idle_ms > 0:
            self._tasks.append(asyncio.create_task(self._idle_loop()))
        if self.metrics_listen:
            host, _, port = self.metrics_listen.rpartition(":")
            self.metrics_port = await self.metrics.serve(host or "127.0.0.1", int(port))
        if self.http_api is not None:
            await self.http_api.start()
        log.info(
            "chronik broker %s listening on %s, data in %s",
            self.node_id,
            ", ".join(f"{s.name}://{s.host}:{s.port}" for s in self.security.listeners),
            self.data_dir,
        )
        # What start() built (logs, indexes, groups: millions of objects with thousands of
        # partitions) lives as long as the broker: moved out of the collector's reach, a
        # full collection, which allocation-heavy requests (Metadata of every partition,
        # a console page) set off, no longer walks it, and stops the event loop for
        # milliseconds instead of hundreds of them.
        gc.freeze()
        self.started.set()

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, flush, close. In a cluster the
        leadership of this broker's partitions is handed on first (controlled shutdown),
        while it still answers."""
        if self.cluster is not None and not self._stopping:
            await self.cluster.controlled_shutdown()
        # A compaction pass stops at its next batch; cancelling the retention task below
        # waits for its worker, so nothing writes once the logs are closed.
        self._stopping = True
        if self._compaction is not None:
            self._compaction.stop()
        if self._listener is not None:
            await self._listener.close()
        if self.http_api is not None:
            await self.http_api.close()
        if self.registry_api is not None:
            await self.registry_api.close()
        if self.registry is not None:
            await self.registry.close()
        if self.coordinator is not None:
            # Held JoinGroup/SyncGroup requests are answered NOT_COORDINATOR now
            # rather than when their rebalance would time out.
            self.coordinator.release_waiters()
        await asyncio.gather(
            *(c.drain_and_close(STOP_DRAIN_SECONDS) for c in list(self._connections))
        )
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.cluster is not None:
            # Closing the session removes this broker's registration at once, so the
            # controller marks its partitions offline now rather than after the timeout.
            await self.cluster.stop()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.stop()
        if self.coordinator is not None:
            await self.coordinator.stop()
        await self.metrics.close()
        if self.cluster is not None:
            self._write_hw_checkpoint()
        self.catalog.close()
        log.info("chronik broker stopped")

    async def _connect_cluster(self) -> None:
        self.cluster = ClusterNode(self.config, self.security, lambda: (self.host, self.port))
        # SASL checks the cluster's users (ZooKeeper's /config/users), not a local file.
        view = self.cluster.view
        self.security.share_credentials(SharedCredentials(lambda: view.users))
        local = _read_cluster_id(self.data_dir)
        try:
            self.cluster_id = await self.cluster.connect(local)
        except RuntimeError as exc:
            await self.cluster.stop()
            raise BrokerStartError(str(exc)) from None
        if local is not None and local != self.cluster_id:
            await self.cluster.stop()
            raise BrokerStartError(
                f"the cluster id in ZooKeeper ({self.cluster_id}) is not the one in "
                f"{self.data_dir / 'meta.properties'} ({local}): this data directory belongs "
                "to another cluster"
            )
        _write_meta_properties(self.data_dir, self.cluster_id, self.node_id)
        # The ACLs are ZooKeeper's /kafka-acl, shared by every broker, not a local file.
        from chronik.cluster.acl_znodes import ZkAcls

        acls = ZkAcls(self.cluster.session)
        try:
            await acls.start()
        except Exception as exc:
            await self.cluster.stop()
            raise BrokerStartError(f"cannot read the ACLs from ZooKeeper: {exc}") from None
        self.authorizer.use(acls)
        # Client quotas: ZooKeeper's /config/users and /config/clients, as Kafka kept them.
        from chronik.cluster.quota_znodes import ZkQuotas

        quotas = ZkQuotas(self.cluster.session)
        try:
            await quotas.start()
        except Exception as exc:
            await self.cluster.stop()
            raise BrokerStartError(f"cannot read the client quotas from ZooKeeper: {exc}") from None
        self.quotas.use(quotas)

    def reload_tls(self) -> None:
        """New TLS connections use key and trust stores read anew (SIGHUP, or a change of
        their files); open connections keep theirs."""
        if self.security.reload_tls():
            for b in self._bound:
                if b.tls is not None:
                    b.tls = self.security.tls

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spec: ListenerSpec
    ) -> None:
        try:
            conn = Connection(self, reader, writer, spec)
        except PrincipalRuleError as exc:
            peer = writer.get_extra_info("peername")
            log.warning("closing connection from %s: %s", peer[0] if peer else "?", exc)
            writer.close()
            return
        self._connections.add(conn)
        try:
            await conn.serve()
        finally:
            self._connections.discard(conn)

    async def _idle_loop(self) -> None:
        """Close connections idle longer than connections.max.idle.ms."""
        idle = self.config.connections_max_idle_ms / 1000
        interval = min(max(idle / 4, 0.01), 1.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._connections):
                if not conn.closing and conn.idle_seconds(now) > idle:
                    log.debug("closing connection from %s: idle for over %.0f ms",
                              conn.peer, idle * 1000)
                    conn.close_idle()

    async def _tls_watch_loop(self) -> None:
        while True:
            await asyncio.sleep(TLS_WATCH_SECONDS)
            if self.security.tls_settings.changed():
                self.reload_tls()

    async def _retention_loop(self) -> None:
        """Delete what retention lets go, and compact compact-policy logs."""
        interval = max(self.config.retention_check_interval_ms, 100) / 1000
        while not self._stopping:
            await asyncio.sleep(interval)
            now = self.now_ms()
            for topic in list(self.catalog.topics.values()):
                for partition_log in topic.local_logs():
                    if self._stopping:
                        return
                    if partition_log.closed:  # deleted while an earlier pass ran
                        continue
                    try:
                        partition_log.apply_retention(now)
                        job = partition_log.compaction_job(now)
                        if job is not None:
                            await self._compact(job)
                    except Exception:
                        log.exception("retention failed for %s", topic.name)

    async def _compact(self, job: CompactionJob) -> None:
        """Rewriting segments is file I/O: off the loop, so serving goes on. The job is
        installed (or cleaned up) here, on the loop, once its worker is done, even when
        the task is cancelled (shutdown) while it runs."""
        self._compaction = job
        worker = asyncio.get_running_loop().run_in_executor(None, job.run)
        try:
            try:
                await asyncio.shield(worker)
            except asyncio.CancelledError:
                job.stop()
                await worker
                try:
                    job.install()
                except Exception:
                    log.exception("compaction failed for %s", job.log.name)
                raise
            job.install()
        finally:
            self._compaction = None

    async def _hw_checkpoint_loop(self) -> None:
        """Kafka's replication-offset-checkpoint: each replicated log's high watermark,
        so a restarted broker serves consumers what they could see before."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.hw_checkpoint_interval_ms / 1000)
            # Taken on the loop, written (two fsyncs) on a worker thread: the loop, and
            # every acknowledgement waiting on it, does not stall on the disk.
            rows = self.catalog.hw_checkpoint_rows()
            try:
                await loop.run_in_executor(None, self.catalog.write_hw_checkpoint, rows)
            except OSError as exc:
                log.warning("high watermark checkpoint not written: %s", exc)

    def _write_hw_checkpoint(self) -> None:
        try:
            self.catalog.write_hw_checkpoint()
        except OSError as exc:
            log.warning("high watermark checkpoint not written: %s", exc)

    async def _flush_loop(self) -> None:
        """fsync logs whose data has been unflushed longer than their flush.ms."""
        while True:
            await asyncio.sleep(FLUSH_CHECK_SECONDS)
            now = self.now_ms()
            for topic in list(self.catalog.topics.values()):
                if topic.log_config.flush_interval_ms >= 2**63 - 1:
                    continue
                for partition_log in topic.local_logs():
                    try:
                        partition_log.maybe_flush(now)
                    except Exception:
                        log.exception("flush failed for %s", topic.name)

    def locate(self, name: str, index: int) -> tuple[PartitionLog | None, int]:
        """The local log a write to a partition this broker leads goes to, or None and
        the error code (chronik.broker.topics.data_partition)."""
        return data_partition(self, self.catalog.get(name), name, index)

    def partition_count(self, name: str) -> int | None:
        return partition_count(self, name)

    @property
    def config_values(self) -> dict[str, str]:
        return self.config.values

    def _offsets_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        complete = getattr(self.coordinator, "complete_transaction", None)
        if complete is not None:
            complete(partition, producer_id, commit)

    # -- long poll ---------------------------------------------------------------

    def wake_fetches(self, partition_log: object, followers: bool = True) -> None:
        """Wake the fetches waiting on ``partition_log``: on an append every one; when only
        its high watermark moved (``followers`` False) consumers' alone. A follower reads
        to the log end, so a moved high watermark gives it nothing to take: woken, it
        would answer empty and ask again, a fetch round per follower per acknowledgement
        (Kafka's DelayedFetch of a follower completes on new bytes only)."""
        if self.registry is not None:
            self.registry.log_grew(partition_log)
        key = id(partition_log)
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        if followers:
            waiters = self._replica_waiters.pop(key, None)
            if waiters:
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)

    async def wait_for_append(
        self, logs: list[object], timeout: float, replica: bool = False
    ) -> None:
        """Return when any of `logs` is appended to (or, unless ``replica``, its high
        watermark moves), or after `timeout` seconds."""
        if timeout <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        table = self._replica_waiters if replica else self._waiters
        keys = [id(partition_log) for partition_log in logs]
        for key in keys:
            table.setdefault(key, set()).add(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiters = table.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del table[key]

    def handler_for(self, api_key: int) -> Any:
        return apis.HANDLERS.get(api_key)


def _make_coordinator(broker: Broker) -> GroupCoordinator:
    return GroupCoordinator(broker)


async def serve_until_signalled(broker: Broker) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP: read the TLS key and trust stores again, as their files changed.
    loop.add_signal_handler(signal.SIGHUP, broker.reload_tls)
    await broker.start()
    await stop.wait()
    log.info("signal received, shutting down")
    await broker.stop()
