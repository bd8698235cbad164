"""The marker channel to other brokers: one WriteTxnMarkers request in flight per broker;
the transactions that end meanwhile go together in the next request (a producer id once
per request), and every caller gets its own partitions' codes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from chronik.cluster.marker_channel import MarkerChannel
from chronik.cluster.replica_client import BrokerUnreachable

LEADER = 5


class _Client:
    """Answers each WriteTxnMarkers with NONE, or ``code_for`` a partition; the first
    request waits for ``release``."""

    def __init__(self) -> None:
        self.requests: list[list[int]] = []
        self.release = asyncio.Event()
        self.code_for: dict[tuple[str, int], int] = {}
        self.fail = False

    async def request(self, request: Any, timeout: float) -> Any:
        self.requests.append([int(m.producer_id) for m in request.markers])
        if len(self.requests) == 1:
            await self.release.wait()
        if self.fail:
            raise BrokerUnreachable("gone")
        return SimpleNamespace(
            markers=[
                SimpleNamespace(
                    producer_id=m.producer_id,
                    topics=[
                        SimpleNamespace(
                            name=t.name,
                            partitions=[
                                SimpleNamespace(
                                    partition_index=p,
                                    error_code=self.code_for.get((t.name, int(p)), 0),
                                )
                                for p in t.partition_indexes
                            ],
                        )
                        for t in m.topics
                    ],
                )
                for m in request.markers
            ]
        )


def _channel() -> tuple[MarkerChannel, _Client]:
    channel = MarkerChannel(SimpleNamespace(node_id=1), None)  # type: ignore[arg-type]
    client = _Client()
    channel._client = lambda node_id: client  # type: ignore[method-assign]
    return channel, client


def test_markers_queued_behind_a_request_go_together():
    async def scenario() -> None:
        channel, client = _channel()
        client.code_for[("b", 1)] = 6  # NOT_LEADER_OR_FOLLOWER
        first = asyncio.ensure_future(channel.write(LEADER, 1, 0, 0, True, [("a", 0)]))
        await asyncio.sleep(0.01)
        assert client.requests == [[1]]
        later = [
            asyncio.ensure_future(channel.write(LEADER, 2, 0, 0, True, [("a", 0), ("b", 1)])),
            asyncio.ensure_future(channel.write(LEADER, 3, 0, 0, False, [("a", 1)])),
            asyncio.ensure_future(channel.write(LEADER, 2, 1, 0, False, [("a", 2)])),
        ]
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in later)
        client.release.set()
        assert await asyncio.wait_for(first, 5) == {("a", 0): 0}
        answers = await asyncio.wait_for(asyncio.gather(*later), 5)
        assert answers == [{("a", 0): 0, ("b", 1): 6}, {("a", 1): 0}, {("a", 2): 0}]
        # Producer 2's second marker waited for a request of its own.
        assert client.requests == [[1], [2, 3], [2]]
        assert channel._senders == {} and channel._queued == {}

    asyncio.run(scenario())


def test_an_unreachable_broker_answers_every_queued_marker():
    async def scenario() -> None:
        channel, client = _channel()
        client.fail = True
        first = asyncio.ensure_future(channel.write(LEADER, 1, 0, 0, True, [("a", 0)]))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(channel.write(LEADER, 2, 0, 0, True, [("a", 1)]))
        client.release.set()
        unavailable = 15  # COORDINATOR_NOT_AVAILABLE: the coordinator retries
        assert await asyncio.wait_for(first, 5) == {("a", 0): unavailable}
        assert await asyncio.wait_for(second, 5) == {("a", 1): unavailable}

    asyncio.run(scenario())


def test_closing_answers_what_is_in_flight_and_queued():
    async def scenario() -> None:
        channel, client = _channel()
        first = asyncio.ensure_future(channel.write(LEADER, 1, 0, 0, True, [("a", 0)]))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(channel.write(LEADER, 2, 0, 0, True, [("a", 1)]))
        await asyncio.sleep(0.01)
        await channel.close()
        assert await asyncio.wait_for(first, 5) == {("a", 0): 15}
        assert await asyncio.wait_for(second, 5) == {("a", 1): 15}

    asyncio.run(scenario())
