"""A three-broker cluster as Kafka's tools and clients see it: the znodes Kafka would
write, admin requests through any broker, auto-created topics, NOT_LEADER_OR_FOLLOWER
from a broker that does not lead a partition, DescribeCluster, and producer ids that
are unique across the cluster."""

from __future__ import annotations

import base64
import datetime
import re
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kio.schema.produce.v9 import request as produce

from chronik.records.builder import Record, build_batch

from .cluster_support import Cluster, wait_until
from .helpers import (
    BASE_TS,
    RawClient,
    confluent_produce,
    confluent_read,
    create_topic,
    fetch_request,
    nested,
    req,
    sample_records,
    stored_batches,
    topic_name,
)

NONE = 0
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICATION_FACTOR = 38


def raw_metadata(bootstrap: str, topic: str):
    with RawClient(bootstrap) as raw:
        r = raw.request(
            req(
                3, 9,
                topics=(nested(3, 9, "MetadataRequestTopic", name=topic),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    (t,) = r.topics
    return r, t


def is_ephemeral(cluster: Cluster, path: str) -> bool:
    _, stat = cluster.zk.get(path)
    return stat.ephemeralOwner != 0


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def test_znodes_hold_what_kafka_would_put_there(cluster3):
    cluster = cluster3

    cluster_id = cluster.get_json("/cluster/id")
    assert cluster_id["version"] == "1" and len(cluster_id["id"]) == 22

    for i in cluster.ids:
        path = f"/brokers/ids/{i}"
        doc = cluster.get_json(path)
        port = cluster.broker(i).port
        assert (doc["host"], doc["port"]) == ("127.0.0.1", port), doc
        assert doc["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port}"], doc
        assert doc.get("rack") is None  # Kafka writes "rack" only when broker.rack is set
        # Kafka's own decoder requires these two.
        assert isinstance(doc["version"], int) and "jmx_port" in doc, doc
        assert is_ephemeral(cluster, path)

    controller = cluster.get_json("/controller")
    assert controller["version"] == 1 and controller["brokerid"] in cluster.ids
    assert re.fullmatch(r"\d{13}", controller["timestamp"]), controller
    assert is_ephemeral(cluster, "/controller")
    epoch = cluster.controller_epoch()
    assert epoch >= 1 and not is_ephemeral(cluster, "/controller_epoch")
    for path in ("/brokers/topics", "/config/topics", "/admin/delete_topics"):
        assert cluster.exists(path), path

    topic = topic_name("zn")
    create_topic(
        cluster.broker(2).bootstrap, topic, 6, **{"cleanup.policy": "compact",
                                                  "retention.ms": "3600000"}
    )
    cluster.wait_topic(topic, 6)
    doc = cluster.get_json(f"/brokers/topics/{topic}")
    assert doc["version"] == 3
    assert sorted(doc["partitions"], key=int) == [str(p) for p in range(6)]
    assert all(len(replicas) == 1 for replicas in doc["partitions"].values())
    assert {r[0] for r in doc["partitions"].values()} == set(cluster.ids)
    assert (doc["adding_replicas"], doc["removing_replicas"]) == ({}, {})
    # The topic id Metadata reports is the one in ZooKeeper.
    with RawClient(cluster.broker(3).bootstrap) as raw:
        md = raw.request(
            req(3, 12, topics=(nested(3, 12, "MetadataRequestTopic", name=topic, topic_id=None),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        )
    assert kafka_uuid(md.topics[0].topic_id) == doc["topic_id"]

    assert sorted(cluster.children(f"/brokers/topics/{topic}/partitions"), key=int) == [
        str(p) for p in range(6)
    ]
    for p in range(6):
        state = cluster.partition_state(topic, p)
        leader = doc["partitions"][str(p)][0]
        assert state["version"] == 1
        assert (state["leader"], state["isr"]) == (leader, [leader]), state
        assert state["leader_epoch"] >= 0
        assert 1 <= state["controller_epoch"] <= cluster.controller_epoch()

    assert cluster.get_json(f"/config/topics/{topic}") == {
        "version": 1,
        "config": {"cleanup.policy": "compact", "retention.ms": "3600000"},
    }


def test_admin_requests_work_through_any_broker(cluster3):
    cluster = cluster3
    topic = topic_name("adm")
    # CreateTopics through broker 2.
    futures = cluster.admin(2).create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1,
                  config={"retention.ms": "1000000"})],
        operation_timeout=30,
    )
    futures[topic].result(timeout=60)
    cluster.wait_topic(topic, 3)
    assert cluster.get_json(f"/config/topics/{topic}")["config"] == {"retention.ms": "1000000"}

    # IncrementalAlterConfigs through broker 3; every broker then describes the change.
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "2000000",
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "500000",
                        incremental_operation=AlterConfigOpType.SET),
        ],
    )
    for f in cluster.admin(3).incremental_alter_configs([resource]).values():
        f.result(timeout=30)
    assert cluster.get_json(f"/config/topics/{topic}")["config"] == {
        "retention.ms": "2000000",
        "max.message.bytes": "500000",
    }

    def described(i: int) -> dict[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = cluster.admin(i).describe_configs([res])[res].result(timeout=30)
        return {k: e.value for k, e in entries.items()}

    for i in cluster.ids:
        wait_until(
            lambda i=i: described(i)["retention.ms"] == "2000000",
            f"broker {i} describing the new retention.ms",
        )

    # AlterConfigs (the legacy request: the whole set is replaced) through broker 2.
    with RawClient(cluster.broker(2).bootstrap) as raw:
        r = raw.request(req(33, 1, validate_only=False, resources=(
            nested(33, 1, "AlterConfigsResource", resource_type=2, resource_name=topic,
                   configs=(nested(33, 1, "AlterableConfig", name="retention.ms",
                                   value="3000000"),)),
        )))
    assert [int(x.error_code) for x in r.responses] == [NONE]
    assert cluster.get_json(f"/config/topics/{topic}")["config"] == {"retention.ms": "3000000"}
    for i in cluster.ids:
        wait_until(
            lambda i=i: described(i)["retention.ms"] == "3000000"
            and described(i)["max.message.bytes"] != "500000",
            f"broker {i} describing the replaced configs",
        )

    # CreatePartitions through broker 1: 3 -> 7, spread over the live brokers.
    for f in cluster.admin(1).create_partitions([NewPartitions(topic, 7)]).values():
        f.result(timeout=30)
    cluster.wait_topic(topic, 7)
    assignment = cluster.assignment(topic)
    assert sorted(assignment) == list(range(7))
    for p in range(3, 7):
        assert cluster.partition_state(topic, p)["leader"] == assignment[p][0]
    sent = sample_records(140, seed=71)
    confluent_produce(cluster.broker(2).bootstrap, topic, sent)
    got = confluent_read(cluster.broker(3).bootstrap, topic, 7, len(sent))
    assert len(got) == len(sent)
    stored = {p for p in range(7) for i in cluster.ids
              if cluster.partition_dir(i, topic, p).is_dir()}
    assert stored, "no partition directory found"

    # DeleteTopics through broker 3: the znodes and every broker's data go.
    cluster.admin(3).delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    assert_topic_gone(cluster, topic, 7)


def assert_topic_gone(cluster: Cluster, topic: str, partitions: int) -> None:
    wait_until(lambda: not cluster.exists(f"/brokers/topics/{topic}"), f"{topic} znode removed")
    wait_until(lambda: not cluster.exists(f"/config/topics/{topic}"), f"{topic} config removed")
    wait_until(
        lambda: not cluster.exists(f"/admin/delete_topics/{topic}"), f"{topic} deletion done"
    )

    def no_data() -> bool:
        return not any(
            cluster.partition_dir(i, topic, p).exists()
            for i in cluster.ids
            for p in range(partitions)
        )

    wait_until(no_data, f"{topic}'s partition directories deleted on every broker")
    for i in cluster.ids:
        wait_until(
            lambda i=i: int(raw_metadata(cluster.broker(i).bootstrap, topic)[1].error_code)
            == UNKNOWN_TOPIC_OR_PARTITION,
            f"broker {i} forgetting {topic}",
        )


def test_deletion_requested_through_the_admin_znode(cluster3):
    """What `kafka-topics --zookeeper ... --delete` did: write /admin/delete_topics/<t>."""
    cluster = cluster3
    topic = topic_name("zdel")
    create_topic(cluster.broker(1).bootstrap, topic, 6)
    cluster.wait_topic(topic, 6)
    confluent_produce(cluster.broker(1).bootstrap, topic, sample_records(60, seed=72))
    assert any(cluster.partition_dir(i, topic, p).is_dir() for i in cluster.ids for p in range(6))
    cluster.zk.create(f"/admin/delete_topics/{topic}")
    assert_topic_gone(cluster, topic, 6)


def test_replication_factor_above_live_brokers_is_refused(cluster3):
    cluster = cluster3
    topic = topic_name("rf")
    futures = cluster.admin(2).create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=4)], operation_timeout=30
    )
    with pytest.raises(KafkaException) as info:
        futures[topic].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert not cluster.exists(f"/brokers/topics/{topic}")


def test_auto_created_topic(cluster3):
    cluster = cluster3
    topic = topic_name("auto")
    sent = sample_records(20, seed=73)
    confluent_produce(cluster.broker(3).bootstrap, topic, sent)
    # num.partitions defaults to 1; the controller gave it a leader.
    assignment = cluster.assignment(topic)
    assert list(assignment) == [0] and assignment[0][0] in cluster.ids
    assert cluster.partition_state(topic, 0)["leader"] == assignment[0][0]
    got = confluent_read(cluster.broker(1).bootstrap, topic, 1, len(sent))
    assert [g.value for g in got] == [s.value for s in sent]


def produce_request(topic: str, partition: int, data: bytes):
    return produce.ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce.TopicProduceData(
                name=topic,
                partition_data=(produce.PartitionProduceData(index=partition, records=data),),
            ),
        ),
    )


def test_a_partition_is_served_by_its_leader_only(cluster3):
    cluster = cluster3
    topic = topic_name("nl")
    create_topic(cluster.broker(1).bootstrap, topic, 3)
    cluster.wait_topic(topic, 3)
    leaders = cluster.leaders(topic, via=1)
    data = build_batch([Record(BASE_TS, b"k", b"v")])
    for p, leader in leaders.items():
        for i in cluster.ids:
            with RawClient(cluster.broker(i).bootstrap) as raw:
                r = raw.request(produce_request(topic, p, data))
                produced = int(r.responses[0].partition_responses[0].error_code)
                fetched = int(raw.request(fetch_request(topic, p, 0)).responses[0]
                              .partitions[0].error_code)
                listed = int(raw.request(req(
                    2, 7, replica_id=-1, isolation_level=0,
                    topics=(nested(2, 7, "ListOffsetsTopic", name=topic, partitions=(
                        nested(2, 7, "ListOffsetsPartition", partition_index=p, timestamp=-1),
                    )),),
                )).topics[0].partitions[0].error_code)
                deleted = int(raw.request(req(
                    21, 2, timeout=datetime.timedelta(seconds=30),
                    topics=(nested(21, 2, "DeleteRecordsTopic", name=topic, partitions=(
                        nested(21, 2, "DeleteRecordsPartition", partition_index=p, offset=0),
                    )),),
                )).topics[0].partitions[0].error_code)
            expected = NONE if i == leader else NOT_LEADER_OR_FOLLOWER
            assert (produced, fetched, listed, deleted) == (expected,) * 4, (p, leader, i)
            # Whichever broker is asked, Metadata names the leader.
            _, t = raw_metadata(cluster.broker(i).bootstrap, topic)
            assert {q.partition_index: q.leader_id for q in t.partitions} == leaders
    # Exactly one record per partition was written: by its leader.
    got = confluent_read(cluster.broker(2).bootstrap, topic, 3, 3)
    assert sorted((g.partition, g.offset) for g in got) == [(0, 0), (1, 0), (2, 0)]


def test_describe_cluster_lists_every_broker_and_the_controller(cluster3):
    cluster = cluster3
    controller = cluster.controller_id()
    cluster_id = cluster.get_json("/cluster/id")["id"]
    expected = {(i, "127.0.0.1", cluster.broker(i).port) for i in cluster.ids}
    for i in cluster.ids:
        with RawClient(cluster.broker(i).bootstrap) as raw:
            r = raw.request(req(60, 0, include_cluster_authorized_operations=False))
        assert int(r.error_code) == NONE
        assert {(int(b.broker_id), b.host, int(b.port)) for b in r.brokers} == expected
        assert (int(r.controller_id), r.cluster_id) == (controller, cluster_id)
        md = cluster.admin(i).list_topics(timeout=10)
        assert (md.controller_id, md.cluster_id) == (controller, cluster_id)


def test_producer_ids_are_unique_across_brokers(cluster3):
    cluster = cluster3
    pids = []
    for i in cluster.ids * 2:
        with RawClient(cluster.broker(i).bootstrap) as raw:
            r = raw.request(req(22, 4, transactional_id=None,
                                transaction_timeout=datetime.timedelta(seconds=60),
                                producer_id=-1, producer_epoch=-1))
        assert int(r.error_code) == NONE
        pids.append(int(r.producer_id))
    assert len(set(pids)) == len(pids), pids
    block = cluster.get_json("/latest_producer_id_block")
    # Kafka writes the block bounds as strings.
    assert block["version"] == 1 and int(block["block_end"]) >= max(pids), block

    # Two idempotent producers, bootstrapped from different brokers, on one partition.
    topic = topic_name("pid")
    create_topic(cluster.broker(1).bootstrap, topic, 1)
    cluster.wait_topic(topic, 1)
    producers = [
        Producer({"bootstrap.servers": cluster.broker(i).bootstrap, "enable.idempotence": True,
                  "linger.ms": 5})
        for i in (1, 2)
    ]
    errors: list = []
    sent = []
    for round_ in range(10):
        for n, p in enumerate(producers):
            for k in range(20):
                value = f"p{n}-r{round_}-{k}".encode()
                sent.append(value)
                p.produce(topic, value=value, partition=0,
                          on_delivery=lambda err, msg: err and errors.append(err))
            p.poll(0)
    for p in producers:
        assert p.flush(60) == 0
    assert not errors, errors[:3]
    got = confluent_read(cluster.broker(3).bootstrap, topic, 1, len(sent))
    assert sorted(g.value for g in got) == sorted(sent)
    assert [g.offset for g in got] == list(range(len(sent)))
    batch_pids = {h.producer_id for h in stored_batches(
        cluster.broker(cluster.leaders(topic, via=1)[0]).bootstrap, topic, 1)}
    assert len(batch_pids) == 2 and -1 not in batch_pids, batch_pids
