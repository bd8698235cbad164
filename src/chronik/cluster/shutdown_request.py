"""This broker's side of Kafka's controlled shutdown: before it stops, it asks the
controller to hand the leadership of its partitions to other in-sync replicas, so a
planned restart costs clients one metadata refresh rather than a failover's wait. The
controller's side: chronik.cluster.controlled_shutdown.

In order, with controlled.shutdown.enable (the server calls this before it closes
anything):

1. its replica fetchers stop, so that no fetch of its own asks a leader to take it back
   into an ISR it is leaving;
2. ControlledShutdown v3 (its broker id and broker epoch) goes to the controller over the
   inter-broker listener, or straight to its own controller when it is the controller.
   An error, or partitions still led here (no other in-sync replica could take them),
   is asked again after controlled.shutdown.retry.backoff.ms, up to
   controlled.shutdown.max.retries attempts in all, the fetchers following the leaders
   meanwhile; after the last the broker stops anyway, as Kafka's does;
3. once the controller has answered with nothing left, it waits (at most
   VIEW_WAIT_SECONDS) until its own view shows the new leaders and its replicas have
   followed them, answering requests all along, so that a client refreshing its
   metadata from this broker meanwhile learns the new leaders too.

Without a ZooKeeper connection it does not try: the controller it would ask, and the
view it would wait for, are what ZooKeeper last said.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from chronik.cluster.controller import NotController
from chronik.cluster.replica_client import BrokerClient, BrokerUnreachable
from chronik.protocol import errors, legacy
from chronik.protocol.compat import decode, encode
from chronik.storage.errors import StorageError

if TYPE_CHECKING:
    from chronik.cluster.node import ClusterNode

log = logging.getLogger("chronik.cluster")

API_KEY = 7
VERSION = 3
# The controller's answer to one attempt (it writes a few ZooKeeper transactions).
REQUEST_TIMEOUT = 10.0
# Once the leadership is handed on: how long this broker waits to see it in its view.
VIEW_WAIT_SECONDS = 5.0
VIEW_POLL_SECONDS = 0.01


class _Attempt:
    def __init__(self, code: int, remaining: list[tuple[str, int]], why: str = "") -> None:
        self.code = code
        self.remaining = remaining
        self.why = why

    @property
    def succeeded(self) -> bool:
        return self.code == errors.NONE and not self.remaining

    def describe(self) -> str:
        if self.why:
            return self.why
        if self.code != errors.NONE:
            return f"the controller answered error {self.code}"
        names = [f"{t}-{p}" for t, p in self.remaining[:5]]
        more = f" and {len(self.remaining) - 5} more" if len(self.remaining) > 5 else ""
        return (f"{len(self.remaining)} partitions have no other in-sync replica to lead "
                f"them ({', '.join(names)}{more})")


async def shut_down_controlled(node: ClusterNode) -> bool:
    """Hand on this broker's leadership before it stops; whether that succeeded."""
    config = node.config
    if not config.controlled_shutdown or config.controlled_shutdown_max_retries < 1:
        return False
    if not node.session.connected:
        log.warning("controlled shutdown skipped: not connected to ZooKeeper")
        return False
    started = time.monotonic()
    attempts = config.controlled_shutdown_max_retries
    backoff = config.controlled_shutdown_backoff_ms / 1000
    client: BrokerClient | None = None
    succeeded = False
    try:
        for attempt in range(1, attempts + 1):
            await node.replicas.stop_fetching()
            outcome, client = await _ask(node, client)
            if outcome.succeeded:
                succeeded = True
                break
            if attempt == attempts or not node.session.connected:
                log.warning("controlled shutdown failed (%s); shutting down without it",
                            outcome.describe())
                break
            log.info("controlled shutdown: attempt %d of %d: %s; trying again in %d ms",
                     attempt, attempts, outcome.describe(),
                     config.controlled_shutdown_backoff_ms)
            node.replicas.resume_fetching()
            await asyncio.sleep(backoff)
    finally:
        if client is not None:
            client.close()
    if not succeeded:
        return False
    seen = await _await_new_leaders(node)
    log.info("controlled shutdown succeeded in %.2f s%s", time.monotonic() - started,
             "" if seen else f" (the new leaders not seen here within {VIEW_WAIT_SECONDS} s)")
    return True


async def _ask(
    node: ClusterNode, client: BrokerClient | None
) -> tuple[_Attempt, BrokerClient | None]:
    view = node.view
    me = view.brokers.get(node.node_id)
    if me is None:
        return _Attempt(errors.BROKER_NOT_AVAILABLE, [], "this broker is not registered"), client
    controller = view.controller_id
    if controller == node.node_id:
        try:
            remaining = await asyncio.wait_for(
                asyncio.shield(node.controller.controlled_shutdown(node.node_id, me.epoch)),
                REQUEST_TIMEOUT,
            )
        except NotController:
            return _Attempt(errors.NOT_CONTROLLER, []), client
        except StorageError as exc:
            return _Attempt(exc.code, [], f"the controller could not act: {exc}"), client
        except TimeoutError:
            return _Attempt(errors.REQUEST_TIMED_OUT, [], "the controller did not answer"), client
        return _Attempt(errors.NONE, remaining), client
    info = view.brokers.get(controller)
    if info is None:
        return _Attempt(errors.NOT_CONTROLLER, [], "no controller is known"), client
    if client is None or (client.host, client.port) != (info.host, info.port):
        if client is not None:
            client.close()
        client = BrokerClient(info.host, info.port, f"controlled-shutdown-{node.node_id}",
                              security=node.security.client)
    request = legacy.REQUESTS[API_KEY, VERSION](broker_id=node.node_id, broker_epoch=me.epoch)
    try:
        body = await client.request_bytes(API_KEY, VERSION, encode(request), REQUEST_TIMEOUT,
                                          flexible=True)
    except BrokerUnreachable as exc:
        return _Attempt(errors.REQUEST_TIMED_OUT, [], f"controller {controller}: {exc}"), client
    cls = legacy.RESPONSES[API_KEY, VERSION].ControlledShutdownResponse
    try:
        response, _ = decode(cls, body, 0)
    except Exception as exc:  # noqa: BLE001 - a garbled answer is one failed attempt
        return _Attempt(errors.UNKNOWN_SERVER_ERROR, [],
                        f"controller {controller}: unreadable answer: {exc}"), client
    remaining = [(p.topic_name, int(p.partition_index)) for p in response.remaining_partitions]
    return _Attempt(int(response.error_code), remaining), client


async def _await_new_leaders(node: ClusterNode) -> bool:
    """Until no partition with another replica is led here, in the view and in the
    replica manager; False when that takes longer than VIEW_WAIT_SECONDS."""
    view = node.view
    deadline = time.monotonic() + VIEW_WAIT_SECONDS

    def handed_on() -> bool:
        for topic in view.topics.values():
            if topic.name in view.deleting:
                continue  # the controller does not act on them
            for partition, replicas in topic.assignment.replicas.items():
                if len(replicas) < 2 or node.node_id not in replicas:
                    continue
                state = topic.states.get(partition)
                if state is not None and state.leader == node.node_id:
                    return False
                if node.replicas.is_leader(topic.name, partition):
                    return False
        return True

    while not handed_on():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(VIEW_POLL_SECONDS)
    return True
