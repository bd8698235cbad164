"""Seeing transactions from outside: ListTransactions, DescribeTransactions and
DescribeProducers on the wire, `chronik transactions list|describe|describe-producers`,
and the metrics of open transactions, with a confluent-kafka transactional producer."""

from __future__ import annotations

import struct

from confluent_kafka import Producer
from kio.schema.describe_producers.v0 import request as describe_producers
from kio.schema.describe_transactions.v0 import request as describe_transactions
from kio.schema.list_transactions.v1 import request as list_transactions

from chronik.broker.embedded import EmbeddedBroker
from chronik.cli.transactions import DescribedTransaction, read_describe_transactions

from .cli_support import chronik, ok
from .cluster_support import wait_until
from .helpers import RawClient, code, create_topic, req, topic_name
from .replication_support import create_replicated_topic
from .test_metrics import scrape


def open_transaction(bootstrap: str, txn_id: str, topic: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    producer.flush(10)
    return producer


def listed(raw: RawClient, states=(), pids=(), duration=-1):
    response = raw.request(
        list_transactions.ListTransactionsRequest(
            state_filters=tuple(states), producer_id_filters=tuple(pids), duration_filter=duration
        )
    )
    assert int(response.error_code) == 0
    states_found = {t.transactional_id: t.transaction_state for t in response.transaction_states}
    return states_found, tuple(response.unknown_state_filters)


def test_transactions_on_the_wire_and_in_the_cli(tmp_path):
    with EmbeddedBroker(tmp_path / "data", metrics_listen="127.0.0.1:0") as broker:
        bootstrap = broker.bootstrap
        topic = topic_name("tools")
        create_topic(bootstrap, topic)
        txn_id = topic_name("tid")
        producer = open_transaction(bootstrap, txn_id, topic)

        with RawClient(bootstrap) as raw:
            assert listed(raw)[0][txn_id] == "Ongoing"
            assert txn_id in listed(raw, states=["Ongoing"])[0]
            assert txn_id not in listed(raw, states=["CompleteCommit"])[0]
            assert listed(raw, states=["Ongoing", "Sleeping"])[1] == ("Sleeping",)
            assert txn_id not in listed(raw, duration=3_600_000)[0]

            # (An unknown id is asked below through the CLI: its start time -1, as Kafka
            # answers it, is more than kio's decoder accepts.)
            described = raw.request(
                describe_transactions.DescribeTransactionsRequest(transactional_ids=(txn_id,))
            )
            (mine,) = described.transaction_states
            assert (int(mine.error_code), mine.transaction_state) == (0, "Ongoing")
            assert [(t.topic, tuple(t.partitions)) for t in mine.topics] == [(topic, (0,))]

            producers = raw.request(
                describe_producers.DescribeProducersRequest(
                    topics=(describe_producers.TopicRequest(name=topic, partition_indexes=(0,)),)
                )
            )
            (part,) = producers.topics[0].partitions
            (state,) = part.active_producers
            assert int(state.producer_id) == int(mine.producer_id)
            assert (state.last_sequence, state.current_txn_start_offset) == (2, 0)

            unknown = raw.request(
                describe_producers.DescribeProducersRequest(
                    topics=(
                        describe_producers.TopicRequest(name=topic, partition_indexes=(7, -1)),
                        describe_producers.TopicRequest(name="no-such", partition_indexes=(0,)),
                    )
                )
            )
            assert [
                (t.name, p.partition_index, code(p.error_code), p.active_producers)
                for t in unknown.topics
                for p in t.partitions
            ] == [(topic, 7, 3, ()), (topic, -1, 3, ()), ("no-such", 0, 3, ())]

        metrics = scrape(broker.broker.metrics_port)
        assert metrics["chronik_open_transactions"] == 1
        assert metrics[f'chronik_last_stable_offset_lag{{topic="{topic}",partition="0"}}'] == 3
        assert metrics['chronik_transactional_ids{state="Ongoing"}'] >= 1

        lines = ok("transactions", "list", bootstrap=bootstrap).lines
        assert lines[0].split() == [
            "TransactionalId",
            "Coordinator",
            "ProducerId",
            "TransactionState",
        ]
        assert [txn_id, "1", str(mine.producer_id), "Ongoing"] in [ln.split() for ln in lines]
        row = ok("transactions", "describe", txn_id, bootstrap=bootstrap).lines[1].split()
        assert row[1:5] == [txn_id, str(mine.producer_id), "0", "Ongoing"]
        assert row[-1] == f"{topic}-0"
        producers_out = ok(
            "transactions",
            "describe-producers",
            "--topic",
            topic,
            "--partition",
            "0",
            bootstrap=bootstrap,
        ).lines
        assert producers_out[1].split()[0] == str(mine.producer_id)
        assert producers_out[1].split()[-1] == "0"  # the open transaction's first offset

        producer.commit_transaction(20)
        row = ok("transactions", "describe", txn_id, bootstrap=bootstrap).lines[1].split()
        assert row[4] == "CompleteCommit" and row[-1] == "None"
        assert scrape(broker.broker.metrics_port)["chronik_open_transactions"] == 0

        missing = chronik("transactions", "describe", "no-such-id", bootstrap=bootstrap)
        assert missing.returncode == 1
        assert missing.error_lines == [
            "chronik: error: transactional id 'no-such-id': TRANSACTIONAL_ID_NOT_FOUND"
        ]
        bogus = chronik("transactions", "list", "--state", "Bogus", bootstrap=bootstrap)
        assert bogus.returncode == 1 and "unknown state: Bogus" in bogus.stderr


NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16


def describe_partition(raw: RawClient, topic: str) -> object:
    """DescribeProducers of partition 0, once every replica has the producer's batches
    (a follower may answer a moment after the leader acknowledged them)."""

    def answer() -> object:
        response = raw.request(
            describe_producers.DescribeProducersRequest(
                topics=(describe_producers.TopicRequest(name=topic, partition_indexes=(0,)),)
            )
        )
        (part,) = response.topics[0].partitions
        return part if part.active_producers or code(part.error_code) else None

    return wait_until(answer, f"the producers of {topic}-0", timeout=10)


def describe_raw(raw: RawClient, txn_id: str) -> list[DescribedTransaction]:
    """DescribeTransactions read with the CLI's reader: an error answer carries the start
    time -1, which kio's decoder refuses."""
    sent = raw.send(describe_transactions.DescribeTransactionsRequest(transactional_ids=(txn_id,)))
    (size,) = struct.unpack(">i", raw._read(4))
    frame = raw._read(size)
    assert struct.unpack_from(">i", frame)[0] == sent
    return read_describe_transactions(frame[5:])  # correlation id, empty tagged fields


def test_each_broker_of_a_cluster_answers_for_what_it_leads(cluster3):
    """ListTransactions on a broker lists only the ids of the coordinator partitions it
    leads; DescribeTransactions elsewhere is NOT_COORDINATOR; DescribeProducers is
    answered by every replica, leader or follower (as Kafka's), and is
    NOT_LEADER_OR_FOLLOWER on a broker without one; the CLI asks the right brokers."""
    cluster = cluster3
    # The first FindCoordinator of key type 1 on this cluster: it creates
    # __transaction_state, and still the CLI's answer is the id's, not the coordinator's.
    missing = chronik("transactions", "describe", "no-such-id", bootstrap=cluster.bootstrap)
    assert missing.error_lines == [
        "chronik: error: transactional id 'no-such-id': TRANSACTIONAL_ID_NOT_FOUND"
    ]
    topic = topic_name("tools-cluster")
    create_replicated_topic(cluster, topic, 1, rf=2)
    txn_id = topic_name("tid-cluster")
    producer = open_transaction(cluster.bootstrap, txn_id, topic)

    def coordinator() -> int:
        with RawClient(cluster.bootstrap.split(",")[0]) as raw:
            found = raw.request(req(10, 3, key=txn_id, key_type=1))
        return int(found.node_id) if code(found.error_code) == 0 else 0

    owner = wait_until(coordinator, f"the coordinator of {txn_id}")
    replicas = set(cluster.assignment(topic)[0])
    for i in cluster.ids:
        with RawClient(cluster.broker(i).bootstrap) as raw:
            ids = wait_until(lambda raw=raw: listed(raw), f"broker {i}'s listing")[0]
            assert (txn_id in ids) == (i == owner), f"broker {i} lists {ids}"
            (state,) = describe_raw(raw, txn_id)
            assert state.error_code == (0 if i == owner else NOT_COORDINATOR)
            assert state.start_ms > 0 if i == owner else state.start_ms == -1
            part = describe_partition(raw, topic)
            if i in replicas:
                (state,) = part.active_producers
                assert code(part.error_code) == 0
                assert (state.last_sequence, state.current_txn_start_offset) == (2, 0)
            else:
                assert code(part.error_code) == NOT_LEADER_OR_FOLLOWER
                assert part.active_producers == ()

    rows = [ln.split() for ln in ok("transactions", "list", bootstrap=cluster.bootstrap).lines]
    assert [r for r in rows if r[0] == txn_id][0][1:2] == [str(owner)]
    row = ok("transactions", "describe", txn_id, bootstrap=cluster.bootstrap).lines[1].split()
    assert (row[0], row[1], row[4]) == (str(owner), txn_id, "Ongoing")
    out = ok(
        "transactions",
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
        bootstrap=cluster.bootstrap,
    ).lines
    assert out[1].split()[-1] == "0"
    follower = sorted(replicas - {cluster.leaders(topic, owner)[0]})[0]
    out = ok(
        "transactions",
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
        "--broker-id",
        str(follower),
        bootstrap=cluster.bootstrap,
    ).lines
    assert out[1].split()[-1] == "0"
    (outsider,) = set(cluster.ids) - replicas
    refused = chronik(
        "transactions",
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
        "--broker-id",
        str(outsider),
        bootstrap=cluster.bootstrap,
    )
    assert refused.returncode == 1
    assert refused.error_lines == [f"chronik: error: {topic}-0: NOT_LEADER_OR_FOLLOWER"]
    producer.abort_transaction(20)
    row = ok("transactions", "describe", txn_id, bootstrap=cluster.bootstrap).lines[1].split()
    assert row[4] == "CompleteAbort"
