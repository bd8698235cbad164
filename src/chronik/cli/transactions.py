"""`chronik transactions list|describe|describe-producers`, as Kafka's
kafka-transactions.sh: the transactions each coordinator holds (ListTransactions, asked
of every broker), one transactional id's state (FindCoordinator, then
DescribeTransactions on its coordinator), and the producers writing to a partition
(DescribeProducers on its leader).

The broker list and partition leaders come from Metadata (confluent-kafka); the three
transaction APIs have no client in librdkafka, so they are sent with the broker's own
protocol client.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from chronik.cli.args import add_bootstrap, non_negative_int
from chronik.cli.clients import Cluster
from chronik.cli.errors import CliError
from chronik.cli.table import print_table
from chronik.cluster.replica_client import BrokerClient, BrokerUnreachable, request_module

FIND_COORDINATOR = (10, 3)
DESCRIBE_PRODUCERS = (61, 0)
DESCRIBE_TRANSACTIONS = (65, 0)
LIST_TRANSACTIONS = (66, 1)
TRANSACTION_KEY = 1
T = TypeVar("T")
# Coordinator errors Kafka's admin client retries: __transaction_state being created or
# loaded after a failover, or the coordinator moving. Retried for RETRY_FOR_S, then the
# last one is reported.
RETRIABLE = frozenset(
    {
        int(ErrorCode.coordinator_load_in_progress),
        int(ErrorCode.coordinator_not_available),
        int(ErrorCode.not_coordinator),
    }
)
RETRY_FOR_S = 15.0
RETRY_EVERY_S = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    listing = sub.add_parser("list", help="the transactional ids every coordinator holds")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        help="only ids in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
        "CompleteCommit, CompleteAbort, PrepareEpochFence); repeatable",
    )
    listing.add_argument(
        "--producer-id",
        action="append",
        type=non_negative_int,
        default=[],
        metavar="ID",
        help="only this producer id; repeatable",
    )
    listing.add_argument(
        "--duration-ms",
        type=non_negative_int,
        metavar="MS",
        help="only transactions open for longer than this",
    )
    add_bootstrap(listing)
    describe = sub.add_parser("describe", help="one transactional id's state")
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    add_bootstrap(describe)
    producers = sub.add_parser("describe-producers", help="the producers writing to one partition")
    producers.add_argument("--topic", required=True, metavar="TOPIC")
    producers.add_argument("--partition", type=non_negative_int, required=True, metavar="P")
    producers.add_argument(
        "--broker-id",
        type=non_negative_int,
        metavar="ID",
        help="ask this replica (a follower answers from what it has replicated); "
        "default: the partition's leader",
    )
    add_bootstrap(producers)


def run(args: argparse.Namespace) -> int:
    cluster = Cluster.from_args(args)
    if args.action == "list":
        return list_transactions(cluster, args)
    if args.action == "describe":
        return describe(cluster, args.transactional_id)
    return describe_producers(cluster, args.topic, args.partition, args.broker_id)


def _brokers(cluster: Cluster) -> dict[int, tuple[str, int]]:
    metadata = cluster.metadata()
    return {b.id: (b.host, b.port) for b in metadata.brokers.values()}


def _ask(
    cluster: Cluster,
    address: tuple[str, int],
    api: tuple[int, int],
    raw: bool = False,
    **fields: Any,
) -> Any:
    cls = load_request_schema(*api)

    async def go() -> Any:
        client = BrokerClient(address[0], address[1], "chronik-cli", cluster.connect_timeout)
        try:
            return await client.request(cls(**fields), cluster.connect_timeout + 10, raw=raw)
        finally:
            client.close()

    try:
        return asyncio.run(go())
    except BrokerUnreachable as exc:
        raise CliError(f"broker {address[0]}:{address[1]} did not answer: {exc}") from None


def _error(code: Any) -> str:
    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error {int(code)}"


def _retrying(attempt: Callable[[], T], code_of: Callable[[T], int]) -> T:
    """``attempt()`` again while its answer's error is a retriable coordinator error,
    for at most RETRY_FOR_S; the last answer either way."""
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        answer = attempt()
        if code_of(answer) not in RETRIABLE or time.monotonic() >= deadline:
            return answer
        time.sleep(RETRY_EVERY_S)


def list_transactions(cluster: Cluster, args: argparse.Namespace) -> int:
    rows = []
    failed = []
    for node, address in sorted(_brokers(cluster).items()):
        response = _retrying(
            lambda address=address: _ask(
                cluster,
                address,
                LIST_TRANSACTIONS,
                state_filters=tuple(args.state),
                producer_id_filters=tuple(args.producer_id),
                duration_filter=-1 if args.duration_ms is None else args.duration_ms,
            ),
            lambda response: int(response.error_code),
        )
        if int(response.error_code):
            failed.append(f"broker {node}: {_error(response.error_code)}")
            continue
        if response.unknown_state_filters:
            raise CliError(f"unknown state: {', '.join(response.unknown_state_filters)}")
        for txn in response.transaction_states:
            rows.append((txn.transactional_id, node, txn.producer_id, txn.transaction_state))
    print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), sorted(rows))
    if failed:
        raise CliError("could not list every coordinator: " + "; ".join(failed))
    return 0


def _describe_once(
    cluster: Cluster, first: tuple[str, int], transactional_id: str
) -> tuple[int, int, DescribedTransaction | None]:
    """(error code, coordinator id, state): FindCoordinator, then DescribeTransactions on
    the broker it names."""
    found = _ask(cluster, first, FIND_COORDINATOR, key=transactional_id, key_type=TRANSACTION_KEY)
    if int(found.error_code):
        return int(found.error_code), -1, None
    body = _ask(
        cluster,
        (found.host, int(found.port)),
        DESCRIBE_TRANSACTIONS,
        raw=True,
        transactional_ids=(transactional_id,),
    )
    try:
        states = read_describe_transactions(body)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CliError(f"broker {found.host}:{found.port} sent a malformed answer: {exc}") from None
    if len(states) != 1:
        raise CliError(f"broker {found.host}:{found.port} answered {len(states)} ids for one")
    return states[0].error_code, int(found.node_id), states[0]


def describe(cluster: Cluster, transactional_id: str) -> int:
    first = next(iter(_brokers(cluster).values()))
    code, node, state = _retrying(
        lambda: _describe_once(cluster, first, transactional_id), lambda answer: answer[0]
    )
    if state is None:
        raise CliError(f"no coordinator for '{transactional_id}': {_error(code)}")
    if state.error_code:
        raise CliError(f"transactional id '{transactional_id}': {_error(state.error_code)}")
    start_ms = state.start_ms
    duration = int(time.time() * 1000) - start_ms if start_ms >= 0 else "None"
    partitions = ",".join(f"{topic}-{p}" for topic, parts in state.topics for p in parts)
    print_table(
        (
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ),
        [
            (
                node,
                state.transactional_id,
                state.producer_id,
                state.producer_epoch,
                state.transaction_state,
                state.timeout_ms,
                start_ms if start_ms >= 0 else "None",
                duration,
                partitions or "None",
            )
        ],
    )
    return 0


@dataclass
class DescribedTransaction:
    error_code: int
    transactional_id: str
    transaction_state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]


def read_describe_transactions(body: bytes) -> list[DescribedTransaction]:
    """DescribeTransactionsResponse v0 (flexible: compact arrays and strings, tagged
    fields), read here because kio's decoder refuses the start time -1 that Kafka
    answers for an id with no transaction open."""
    reader = _Reader(body)
    reader.int32()  # throttle_time_ms
    out = []
    for _ in range(reader.length()):
        txn = DescribedTransaction(
            reader.int16(),
            reader.string(),
            reader.string(),
            reader.int32(),
            reader.int64(),
            reader.int64(),
            reader.int16(),
            [],
        )
        for _ in range(reader.length()):
            topic = reader.string()
            txn.topics.append((topic, [reader.int32() for _ in range(reader.length())]))
            reader.tags()
        reader.tags()
        out.append(txn)
    return out


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self) -> int:
        return max(self.varint() - 1, 0)

    def string(self) -> str:
        size = self.length()
        text = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return text

    def tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()
            self.pos += self.varint()


def describe_producers(
    cluster: Cluster, topic: str, partition: int, broker_id: int | None = None
) -> int:
    meta = cluster.topic(topic)
    if partition not in meta.partitions:
        raise CliError(f"topic '{topic}' has no partition {partition}")
    leader = meta.partitions[partition].leader if broker_id is None else broker_id
    brokers = _brokers(cluster)
    if leader not in brokers:
        if broker_id is not None:
            raise CliError(f"no live broker {broker_id}")
        raise CliError(f"{topic}-{partition} has no leader now")
    topic_request = request_module(*DESCRIBE_PRODUCERS).TopicRequest
    response = _ask(
        cluster,
        brokers[leader],
        DESCRIBE_PRODUCERS,
        topics=(topic_request(name=topic, partition_indexes=(partition,)),),
    )
    (result,) = response.topics[0].partitions
    if int(result.error_code):
        raise CliError(f"{topic}-{partition}: {_error(result.error_code)}")
    print_table(
        (
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ),
        [
            (
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None",
            )
            for p in result.active_producers
        ],
    )
    return 0
