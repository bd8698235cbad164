"""A follower's fetcher: pulls the partitions it follows from one leader broker with
Kafka's own Fetch request (replica_id = this broker's id; Fetch v11, whose fields are
all a follower needs), as Kafka's ReplicaFetcherThread does. num.replica.fetchers of them
share a leader's partitions. Each keeps a fetch session with its leader (KIP-227,
chronik.cluster.fetch_session_handler): after the first full fetch it sends only the
partitions whose position changed, and is answered only those with news. Partitions
under a follower replication throttle are left out of a fetch while the throttle's rate
is over (chronik.cluster.replication_quota).

The Fetch request is encoded and its answer read by hand (chronik.protocol.replica_fetch):
record bytes are appended as views of the answer's frame, never copied or built into
entities on the way.

Before the first fetch of a partition under a new leader epoch the follower asks the
leader, with OffsetForLeaderEpoch (KIP-101/279), where its own latest epoch ends on the
leader and truncates anything after that: a tail the old leader wrote but never
replicated is dropped, so every replica holds the same records at the same offsets.

A follower that started over at its leader's log start on a topic with
key.versioning.enable copies, before fetching that partition again, the version counts
of keys whose records all lay below that offset (chronik's own KeyCounts request,
chronik.protocol.key_counts): no fetched record carries them, and this replica may lead
next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from chronik.cluster.fetch_session_handler import FetchSessionHandler
from chronik.cluster.replica_client import (
    AuthenticationRefused,
    BrokerClient,
    BrokerUnreachable,
    request_module,
)
from chronik.protocol import errors, key_counts, replica_fetch
from chronik.protocol.compat import build
from chronik.protocol.replica_fetch import FetchPosition

if TYPE_CHECKING:
    from chronik.cluster.replica_manager import Replica, ReplicaManager

log = logging.getLogger("chronik.replication")

FETCH_KEY = 1
EPOCH_KEY, EPOCH_VERSION = 23, 3


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        config = manager.node.config
        self.wait_ms = config.replica_fetch_wait_max_ms
        self.min_bytes = config.replica_fetch_min_bytes
        self.max_bytes = config.replica_fetch_response_max_bytes
        self.partition_max_bytes = config.replica_fetch_max_bytes
        self.backoff = config.replica_fetch_backoff_ms / 1000
        self._client: BrokerClient | None = None
        self._session: FetchSessionHandler[tuple[str, int], FetchPosition] = (
            FetchSessionHandler(f"broker {leader_id}")
        )
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            self._client.close()

    # -- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        quotas = self.manager.quotas
        while not self._stopping:
            assigned = self.manager.fetch_set(self.leader_id, self.index)
            now = time.monotonic()
            replicas = [r for r in assigned if r.paused_until <= now]
            if not replicas:
                # Until the view changes, or the first pause is over.
                idle = min([self.backoff or 0.1, *(r.paused_until - now for r in assigned)])
                await self.manager.wait_changed(max(idle, 0.001))
                continue
            client = self._connect()
            if client is None:
                await self.manager.wait_changed(self.backoff or 0.1)
                continue
            try:
                for replica in [r for r in replicas if r.log.key_floor]:
                    await self._copy_key_counts(client, replica)
                truncating = [r for r in replicas if r.needs_truncation]
                if truncating:
                    await self._truncate(client, truncating)
                ready = [r for r in replicas if not r.needs_truncation and not r.log.key_floor]
                held = quotas.follower_held(ready)  # a follower replication throttle
                ready = [r for r in ready if r.key not in held]
                if ready:
                    await self._fetch(client, ready)
                elif held:
                    pause = min(quotas.follower.delay(), self.backoff or 0.1)
                    await self.manager.wait_changed(pause)
                if self._failing:
                    self._failing = False
                    log.info("fetching from broker %d again", self.leader_id)
            except asyncio.CancelledError:
                raise
            except BrokerUnreachable as exc:
                if not self._failing:
                    self._failing = True
                    # A refusal was logged by the client, with its reason.
                    if not isinstance(exc, AuthenticationRefused):
                        log.warning("cannot fetch from broker %d: %s", self.leader_id, exc)
                await self.manager.wait_changed(self.backoff or 0.1)
            except Exception:
                log.exception("fetching from broker %d failed", self.leader_id)
                await asyncio.sleep(self.backoff or 0.1)

    def _connect(self) -> BrokerClient | None:
        info = self.manager.node.view.brokers.get(self.leader_id)
        if info is None:
            return None
        client = self._client
        if client is None or (client.host, client.port) != (info.host, info.port):
            if client is not None:
                client.close()
            client = BrokerClient(
                info.host,
                info.port,
                f"chronik-replica-fetcher-{self.manager.node_id}",
                security=self.manager.node.security.client,
            )
            self._client = client
        return client

    # -- key version counts below a start over (chronik.protocol.key_counts) -----------------

    async def _copy_key_counts(self, client: BrokerClient, replica: Replica) -> None:
        plog = replica.log
        below = plog.key_floor
        after: bytes | None = None
        copied = 0
        while True:
            request = key_counts.Request(
                replica.topic, replica.partition, below, after, key_counts.MAX_KEYS
            )
            body = await client.request_bytes(
                key_counts.API_KEY, 0, key_counts.encode_request(request), timeout=30
            )
            try:
                code, counts, more = key_counts.decode_response(body)
            except ValueError as exc:
                raise BrokerUnreachable(f"broker {self.leader_id}: KeyCounts: {exc}") from None
            if replica.role != "follower" or plog.closed or plog.key_floor != below:
                return  # led, deleted or started over again meanwhile: asked anew if need be
            if code != errors.NONE:
                log.info("%s: key counts below %d from broker %d: error %d", replica.name,
                         below, self.leader_id, code)
                self.manager.pause(replica)
                return
            plog.raise_key_counts(counts, done=not more)
            copied += len(counts)
            if not more:
                log.info("%s: copied %d key version counts below offset %d from broker %d",
                         replica.name, copied, below, self.leader_id)
                return
            after = counts[-1][0]

    # -- truncation (KIP-101/279) ------------------------------------------------------------

    async def _truncate(self, client: BrokerClient, replicas: list[Replica]) -> None:
        module = request_module(EPOCH_KEY, EPOCH_VERSION)
        asked: dict[tuple[str, int], tuple[Replica, int, int]] = {}
        by_topic: dict[str, list[object]] = {}
        for replica in replicas:
            latest = replica.log.epochs.latest_epoch()
            if latest < 0:
                # Nothing to compare: keep what is below the high watermark, as Kafka does.
                self._truncate_to(replica, replica.log.high_watermark, "no leader epochs")
                continue
            asked[replica.key] = (replica, replica.leader_epoch, latest)
            by_topic.setdefault(replica.topic, []).append(build(
                module.OffsetForLeaderPartition,
                partition=replica.partition,
                current_leader_epoch=replica.leader_epoch,
                leader_epoch=latest,
            ))
        if not asked:
            return
        request = build(
            module.OffsetForLeaderEpochRequest,
            replica_id=self.manager.node_id,
            topics=tuple(
                build(module.OffsetForLeaderTopic, topic=name, partitions=tuple(parts))
                for name, parts in by_topic.items()
            ),
        )
        response = await client.request(request, timeout=30)
        for topic in response.topics:
            for part in topic.partitions:
                entry = asked.get((topic.topic, part.partition))
                if entry is None:
                    continue
                replica, epoch, latest = entry
                if replica.role != "follower" or replica.leader_epoch != epoch:
                    continue
                code = int(part.error_code)
                if code != errors.NONE:
                    self.manager.pause(replica, code)
                    continue
                leader_epoch, leader_end = int(part.leader_epoch), int(part.end_offset)
                plog = replica.log
                if leader_epoch < 0 or leader_end < 0:
                    self._truncate_to(replica, plog.high_watermark, "leader knows no such epoch")
                    continue
                if leader_epoch == latest:
                    target = leader_end
                else:
                    # The leader's latest epoch at or below ours: cut where either log
                    # ends that epoch (KIP-279).
                    _, own_end = plog.epochs.end_offset_for(leader_epoch, plog.end_offset)
                    target = min(leader_end, own_end if own_end >= 0 else plog.end_offset)
                self._truncate_to(replica, target, f"leader epoch {leader_epoch} ends there")

    def _truncate_to(self, replica: Replica, offset: int, why: str) -> None:
        plog = replica.log
        if offset < plog.end_offset:
            log.info("%s: truncating from %d to %d (%s)", replica.name, plog.end_offset,
                     offset, why)
            plog.truncate_to(max(offset, plog.start_offset))
        replica.needs_truncation = False

    # -- fetch -------------------------------------------------------------------------------

    async def _fetch(self, client: BrokerClient, replicas: list[Replica]) -> None:
        sent: dict[tuple[str, int], tuple[Replica, int, int]] = {}
        wanted: dict[tuple[str, int], FetchPosition] = {}
        for replica in replicas:
            plog = replica.log
            end = plog.end_offset
            sent[replica.key] = (replica, replica.leader_epoch, end)
            wanted[replica.key] = FetchPosition(end, plog.start_offset, replica.leader_epoch)
        # A fetch session (KIP-227): only what changed is sent, only news answered.
        session = self._session
        send, forget = session.build(wanted)
        body = replica_fetch.encode_request(
            self.manager.node_id, self.wait_ms, self.min_bytes, self.max_bytes,
            session.session_id, session.epoch, send, self.partition_max_bytes, forget,
        )
        try:
            answer = await client.request_view(
                FETCH_KEY, replica_fetch.VERSION, body, timeout=self.wait_ms / 1000 + 30
            )
        except BaseException:
            session.handle_error()
            raise
        try:
            response = replica_fetch.decode_response(answer)
            parts = list(response.partitions())
        except ValueError as exc:
            # A garbled answer: nothing of it is taken, the session and the connection
            # start over.
            session.handle_error()
            client.close()
            raise BrokerUnreachable(f"broker {self.leader_id}: Fetch response: {exc}") from None
        if not session.handle_response(response.error_code, response.session_id):
            return
        now = time.time_ns() // 1_000_000
        manager = self.manager
        quotas = manager.quotas
        for part in parts:
            entry = sent.get((part.topic, part.partition))
            if entry is None:
                continue
            replica, epoch, offset = entry
            plog = replica.log
            if (
                replica.role != "follower"
                or replica.leader_epoch != epoch
                or plog.end_offset != offset
                or plog.closed
            ):
                continue  # the partition moved on while the fetch was out
            manager.fetched(replica, part.error_code, part.records, part.high_watermark,
                            part.log_start_offset, now)
            quotas.follower_received(replica.topic, replica.partition, part.records)
